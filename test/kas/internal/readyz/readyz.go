package readyz

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// Interval is the time between two probes.
const Interval = 100 * time.Millisecond

// Check probes /readyz once and returns nil when it answers 200 "ok".
func Check(ctx context.Context, client *http.Client, host string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(host, "/")+"/readyz", nil)
	if err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// Wait probes /readyz every Interval until it is ready, ctx is done, or
// exited (if not nil) is closed, and returns the last probe's error in the
// latter two cases.
func Wait(ctx context.Context, cfg *rest.Config, exited <-chan struct{}) error {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	defer client.CloseIdleConnections()
	ticker := time.NewTicker(Interval)
	defer ticker.Stop()
	for {
		last := Check(ctx, client, cfg.Host)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("readyz: not ready: %w (last probe: %w)", ctx.Err(), last)
		case <-exited:
			return fmt.Errorf("readyz: the apiserver exited before it was ready (last probe: %w)", last)
		case <-ticker.C:
		}
	}
}
