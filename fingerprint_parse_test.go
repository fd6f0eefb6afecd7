package boltinformer_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/boltinformer/boltinformer"
)

// ParseListOptionsFingerprint gives back what a fingerprint was made of,
// and refuses anything else.
func TestParseListOptionsFingerprint(t *testing.T) {
	for _, tc := range []struct {
		ns   string
		opts metav1.ListOptions
	}{
		{"", metav1.ListOptions{}},
		{"edge", metav1.ListOptions{LabelSelector: `app in (a,"b")`, FieldSelector: "spec.nodeName=node-1"}},
		{"x", metav1.ListOptions{FieldSelector: `metadata.name=a\\b`}},
	} {
		fp := boltinformer.ListOptionsFingerprint(tc.ns, tc.opts)
		ns, opts, ok := boltinformer.ParseListOptionsFingerprint(fp)
		if !ok || ns != tc.ns || opts.LabelSelector != tc.opts.LabelSelector || opts.FieldSelector != tc.opts.FieldSelector {
			t.Errorf("%q: %q %+v %t", fp, ns, opts, ok)
		}
	}
	for _, fp := range []string{"", "x", "0123456789abcdef (ns=\"\" labels=\"\" fields=\"\")", "*v1.Pod"} {
		if _, _, ok := boltinformer.ParseListOptionsFingerprint(fp); ok {
			t.Errorf("%q parsed", fp)
		}
	}
}
