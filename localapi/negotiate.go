package localapi

import (
	"fmt"
	"mime"
	"strings"
)

// format is a wire encoding.
type format int

const (
	formatJSON format = iota
	formatProtobuf
	formatYAML
	numFormats
)

// Media types of the formats.
const (
	mediaJSON     = "application/json"
	mediaProtobuf = "application/vnd.kubernetes.protobuf"
	mediaYAML     = "application/yaml"
)

func (f format) mediaType() string {
	switch f {
	case formatProtobuf:
		return mediaProtobuf
	case formatYAML:
		return mediaYAML
	}
	return mediaJSON
}

// target is what the response holds.
type target int

const (
	targetObject  target = iota // the resource's own kind (a list: its List kind)
	targetTable                 // meta.k8s.io Table
	targetPartial               // meta.k8s.io PartialObjectMetadata(List)
)

// output is a negotiated response: its format, what it holds and, for
// Tables and partial metadata, the meta.k8s.io version asked for.
type output struct {
	format  format
	target  target
	version string // "v1" or "v1beta1" for Tables and partial metadata
}

// negotiate picks the first media type of the Accept header that the
// request can be answered in: list and watch tell which kinds of target
// apply, protobuf whether the resource's objects have a protobuf encoding.
// No Accept header means JSON.
func negotiate(accept string, list, watch, protobuf bool) (output, error) {
	if strings.TrimSpace(accept) == "" {
		return output{format: formatJSON}, nil
	}
	for _, item := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(item))
		if err != nil {
			continue
		}
		var o output
		switch mt {
		case mediaJSON, "application/*", "*/*", "json":
			o.format = formatJSON
		case mediaProtobuf:
			if !protobuf {
				continue
			}
			o.format = formatProtobuf
		case mediaYAML:
			if watch {
				continue // no streaming YAML, as in the apiserver
			}
			o.format = formatYAML
		default:
			continue
		}
		if s, ok := params["stream"]; ok && (s != "watch" || !watch) {
			continue
		}
		as := params["as"]
		if as == "" {
			return o, nil
		}
		if params["g"] != "meta.k8s.io" || (params["v"] != "v1" && params["v"] != "v1beta1") {
			continue
		}
		o.version = params["v"]
		switch {
		case as == "Table":
			if o.format == formatProtobuf {
				continue // Tables have no protobuf encoding
			}
			o.target = targetTable
		case as == "PartialObjectMetadata" && (!list || watch):
			o.target = targetPartial
		case as == "PartialObjectMetadataList" && list && !watch:
			o.target = targetPartial
		default:
			continue
		}
		return o, nil
	}
	return output{}, notAcceptable(fmt.Sprintf("none of the media types %q is served (JSON, YAML, protobuf for built-in kinds; Table and PartialObjectMetadata of meta.k8s.io v1 and v1beta1)", accept))
}
