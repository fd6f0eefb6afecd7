package localapi

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// continueVersion tags the tokens this package writes.
const continueVersion = "localapi/v1"

// continueToken is what a LIST's continue token holds: the resourceVersion
// of the first page (every page is of the state at it) and the key of the
// last object returned. Clients treat it as opaque.
type continueToken struct {
	Version         string `json:"v"`
	ResourceVersion string `json:"rv"`
	Start           string `json:"start"`
}

func encodeContinue(rv, lastKey string) string {
	b, _ := json.Marshal(continueToken{Version: continueVersion, ResourceVersion: rv, Start: lastKey})
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeContinue parses a token; a malformed one is a BadRequest.
func decodeContinue(s string) (continueToken, error) {
	var t continueToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return t, badRequest(fmt.Sprintf("continue key is not valid: %v", err))
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return t, badRequest(fmt.Sprintf("continue key is not valid: %v", err))
	}
	if t.Version != continueVersion {
		return t, badRequest(fmt.Sprintf("continue key is not valid: version %q is not %q", t.Version, continueVersion))
	}
	if t.ResourceVersion == "" {
		return t, badRequest("continue key is not valid: no resourceVersion")
	}
	return t, nil
}
