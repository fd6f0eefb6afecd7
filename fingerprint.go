package boltinformer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

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
