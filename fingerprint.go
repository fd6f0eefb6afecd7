package boltinformer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ListOptionsFingerprint returns the identity of what a list with these
// options selects: namespace and selectors (not paging or
// resourceVersion). Two informers with equal fingerprints see the same
// objects.
func ListOptionsFingerprint(namespace string, opts metav1.ListOptions) string {
	s := fmt.Sprintf("ns=%s\x00labels=%s\x00fields=%s", namespace, opts.LabelSelector, opts.FieldSelector)
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8]) + " " + fmt.Sprintf("(ns=%q labels=%q fields=%q)", namespace, opts.LabelSelector, opts.FieldSelector)
}

// fingerprintScope is the readable part of a ListOptionsFingerprint.
var fingerprintScope = regexp.MustCompile(`^[0-9a-f]{16} \(ns=("(?:[^"\\]|\\.)*") labels=("(?:[^"\\]|\\.)*") fields=("(?:[^"\\]|\\.)*")\)$`)

// ParseListOptionsFingerprint returns the namespace and selectors a
// ListOptionsFingerprint was made of (a Factory's informers record one:
// Indexer().SavedState().ListOptions); ok is false for anything else (an
// informer given no ListOptions, another format).
func ParseListOptionsFingerprint(fp string) (namespace string, opts metav1.ListOptions, ok bool) {
	m := fingerprintScope.FindStringSubmatch(fp)
	if m == nil {
		return "", metav1.ListOptions{}, false
	}
	var parts [3]string
	for i := range parts {
		s, err := strconv.Unquote(m[i+1])
		if err != nil {
			return "", metav1.ListOptions{}, false
		}
		parts[i] = s
	}
	if ListOptionsFingerprint(parts[0], metav1.ListOptions{LabelSelector: parts[1], FieldSelector: parts[2]}) != fp {
		return "", metav1.ListOptions{}, false
	}
	return parts[0], metav1.ListOptions{LabelSelector: parts[1], FieldSelector: parts[2]}, true
}
