package localapi_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
)

func TestSmoke(t *testing.T) {
	a := startAgent(t, "", newPodSource(30))
	_, _, rc := serveAgent(t, a, nil)
	var pods corev1.PodList
	if err := rc.Get().Resource("pods").VersionedParams(&metav1.ListOptions{}, scheme.ParameterCodec).Do(t.Context()).Into(&pods); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 30 || pods.ResourceVersion != a.src.ResourceVersion() {
		t.Fatalf("%d pods at %q", len(pods.Items), pods.ResourceVersion)
	}
	var p corev1.Pod
	if err := rc.Get().Namespace("ns-1").Resource("pods").Name("pod-000001").Do(t.Context()).Into(&p); err != nil {
		t.Fatal(err)
	}
	t.Log(p.Name, p.Kind, p.ResourceVersion)
}
