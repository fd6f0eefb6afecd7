package processor

import (
	"time"

	"k8s.io/klog/v2"
)

// MinimumResyncPeriod is the smallest non-zero resync period client-go's
// informer grants a handler; the informer raises smaller requests to it
// before computing ListenerOptions.
const MinimumResyncPeriod = time.Second

// DetermineResyncPeriod returns the effective resync period of a listener
// that requested requested, in an informer whose resync check period is
// checkPeriod, with client-go's rules: zero stays zero (no resync); an
// informer that never checks (checkPeriod zero) gives zero; a request below
// the check period is raised to it. Adjustments are logged as warnings.
func DetermineResyncPeriod(logger klog.Logger, requested, checkPeriod time.Duration) time.Duration {
	switch {
	case requested == 0:
		return 0
	case checkPeriod == 0:
		logger.Info("Warning: the specified resyncPeriod is invalid because this shared informer doesn't support resyncing", "desired", requested)
		return 0
	case requested < checkPeriod:
		logger.Info("Warning: the specified resyncPeriod is being increased to the minimum resyncCheckPeriod", "desired", requested, "resyncCheckPeriod", checkPeriod)
		return checkPeriod
	default:
		return requested
	}
}

// resyncDueLocked reports whether l is due for resync at now; a listener
// with a zero period never is. Caller holds the Processor's listenersLock.
func (l *Listener) resyncDueLocked(now time.Time) bool {
	if l.resyncPeriod == 0 {
		return false
	}
	return !now.Before(l.nextResync)
}
