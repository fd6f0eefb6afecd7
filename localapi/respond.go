package localapi

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// gzipThreshold is kube-apiserver's: a response body larger than this is
// gzipped for a client that accepts it (responsewriters'
// defaultGzipThresholdBytes).
const gzipThreshold = 128 << 10

// gzipPool holds gzip writers at kube-apiserver's level (1: fastest).
var gzipPool = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return zw
}}

// acceptsGzip reports whether the request's Accept-Encoding names gzip
// (one of its comma-separated tokens, as kube-apiserver reads it).
func acceptsGzip(r *http.Request) bool {
	for _, tok := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if strings.TrimSpace(tok) == "gzip" {
			return true
		}
	}
	return false
}

// isPretty reports whether a JSON response is indented, as kube-apiserver
// decides it: the query's pretty parameter when it has one (a boolean;
// anything else is false), else whether the user agent is curl, wget or a
// browser.
func isPretty(r *http.Request) bool {
	if strings.Contains(r.URL.RawQuery, "pretty") {
		if p := r.URL.Query().Get("pretty"); p != "" {
			b, _ := strconv.ParseBool(p)
			return b
		}
	}
	ua := r.UserAgent()
	return strings.HasPrefix(ua, "curl") || strings.HasPrefix(ua, "Wget") || strings.HasPrefix(ua, "Mozilla/5.0")
}

// indentJSON returns body (compact JSON, perhaps with a final newline)
// indented as json.MarshalIndent(obj, "", "  ") writes it: what
// kube-apiserver's pretty serializer sends. A body that is not JSON is
// returned as it is.
func indentJSON(body []byte) []byte {
	var out bytes.Buffer
	out.Grow(len(body) + len(body)/4)
	if err := json.Indent(&out, bytes.TrimRight(body, "\n"), "", "  "); err != nil {
		return body
	}
	return out.Bytes()
}

// writeBody writes a 200 with body in format f.
func writeBody(w http.ResponseWriter, r *http.Request, f format, body []byte) {
	respond(w, r, f, http.StatusOK, body)
}

// respond writes a response of format f with the status code, as
// kube-apiserver writes it: JSON indented when the request asks for it
// (isPretty), gzipped when larger than gzipThreshold and the client
// accepts gzip. A HEAD gets the headers only.
func respond(w http.ResponseWriter, r *http.Request, f format, code int, body []byte) {
	if f == formatJSON && isPretty(r) {
		body = indentJSON(body)
	}
	h := w.Header()
	h.Set("Content-Type", f.mediaType())
	h.Set("X-Content-Type-Options", "nosniff")
	if len(body) <= gzipThreshold || !acceptsGzip(r) {
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(code)
		if r.Method != http.MethodHead {
			_, _ = w.Write(body)
		}
		return
	}
	h.Set("Content-Encoding", "gzip")
	h.Add("Vary", "Accept-Encoding")
	w.WriteHeader(code)
	if r.Method == http.MethodHead {
		return
	}
	zw := gzipPool.Get().(*gzip.Writer)
	zw.Reset(w)
	if _, err := zw.Write(body); err == nil { // else the client went away
		_ = zw.Close()
	}
	zw.Reset(nil)
	gzipPool.Put(zw)
}

// writeError writes err as a Status (JSON, which every client decodes).
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	st := toStatus(err)
	st.APIVersion, st.Kind = "v1", "Status"
	var buf bytes.Buffer
	if err := jsonSerializer.Encode(st, &buf); err != nil {
		http.Error(w, st.Message, int(st.Code))
		return
	}
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(st.Details.RetryAfterSeconds))
	}
	code := int(st.Code)
	if code == 0 {
		code = http.StatusInternalServerError
	}
	respond(w, r, formatJSON, code, buf.Bytes())
}
