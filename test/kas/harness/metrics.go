package harness

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// Metrics scrapes the apiserver's /metrics and returns the metric families by
// name. Counters start at zero with each apiserver process: take differences
// within one apiserver's lifetime.
func (c *Cluster) Metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	cfg := c.RESTConfig()
	if c.APIServerPID() == 0 {
		return nil, ErrAPIServerDown
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("harness: scrape /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("harness: scrape /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("harness: parse /metrics: %w", err)
	}
	return fams, nil
}

// MetricSum scrapes /metrics and returns the sum of the values of metric
// name over the series whose labels include all of labels (an empty value
// matches only an absent or empty label). Counters, gauges and untyped
// metrics add their values; histograms and summaries add their sample
// counts. A metric that does not exist yet sums to 0.
func (c *Cluster) MetricSum(ctx context.Context, name string, labels map[string]string) (float64, error) {
	fams, err := c.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	fam, ok := fams[name]
	if !ok {
		return 0, nil
	}
	var sum float64
	for _, m := range fam.GetMetric() {
		if !matchLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case m.Summary != nil:
			sum += float64(m.Summary.GetSampleCount())
		}
	}
	return sum, nil
}

func matchLabels(m *dto.Metric, want map[string]string) bool {
	have := make(map[string]string, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		have[lp.GetName()] = lp.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// RequestCount returns apiserver_request_total for verb and resource, summed
// over groups, versions, scopes and response codes. verb is the apiserver's
// reported verb in any case: LIST, WATCH (WatchList requests count as WATCH),
// GET, POST, PUT, PATCH, DELETE, DELETECOLLECTION, APPLY; "" counts all
// verbs. resource is the plural ("pods"); "pods/status" counts that
// subresource, and a plain resource counts only requests without a
// subresource. A WATCH is counted when it ends, not when it starts (see
// MetricSum("apiserver_longrunning_requests", ...) for open watches).
func (c *Cluster) RequestCount(ctx context.Context, verb, resource string) (float64, error) {
	res, sub, _ := strings.Cut(resource, "/")
	labels := map[string]string{"resource": res, "subresource": sub}
	if verb != "" {
		labels["verb"] = strings.ToUpper(verb)
	}
	return c.MetricSum(ctx, "apiserver_request_total", labels)
}
