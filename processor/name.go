package processor

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"

	"k8s.io/client-go/tools/cache"
)

// handlerName derives a readable name for a handler that was registered
// without ListenerOptions.Name: for cache.ResourceEventHandlerFuncs the
// package (or receiver) its functions are defined in, else the handler's
// package-qualified type name.
func handlerName(h cache.ResourceEventHandler) string {
	var name string
	switch h := h.(type) {
	case cache.ResourceEventHandlerFuncs:
		name = funcsName(h.AddFunc, h.UpdateFunc, h.DeleteFunc)
	case *cache.ResourceEventHandlerFuncs:
		if h != nil {
			name = funcsName(h.AddFunc, h.UpdateFunc, h.DeleteFunc)
		}
	default:
		t := reflect.TypeOf(h)
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Name() != "" {
			name = t.Name()
			if t.PkgPath() != "" {
				name = t.PkgPath() + "." + name
			}
		}
	}
	if name == "" {
		name = fmt.Sprintf("%T", h)
	}
	return name
}

// funcsName returns the common qualifier of the non-nil functions (what
// precedes the last '.' of their symbol names) if they share one, else
// their names joined with '+'.
func funcsName(fs ...interface{}) string {
	var names []string
	qualifier, single := "", true
	for _, f := range fs {
		v := reflect.ValueOf(f)
		if v.Kind() != reflect.Func || v.IsNil() {
			continue
		}
		fn := runtime.FuncForPC(v.Pointer())
		if fn == nil {
			continue
		}
		full := fn.Name()
		names = append(names, full)
		q := full
		if i := strings.LastIndexByte(full, '.'); i > 0 {
			q = full[:i]
		}
		switch qualifier {
		case "":
			qualifier = q
		case q:
		default:
			single = false
		}
	}
	if single {
		return qualifier
	}
	return strings.Join(names, "+")
}
