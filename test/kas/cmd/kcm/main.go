//go:build kcm

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "time/tzdata" // CronJob time zones, as kube-controller-manager

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json, as kube-controller-manager
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics, as kube-controller-manager
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
)

func main() {
	os.Exit(cli.Run(newCommand()))
}

// boltFlags are the flags this command adds to kube-controller-manager's.
type boltFlags struct {
	mode             string
	cache            string
	syncPolicy       string
	freshTimeout     time.Duration
	encryptionConfig string
	stats            string
}

const (
	modeStock      = "stock"
	modePersistent = "persistent"
)

func (b *boltFlags) addTo(fs *pflag.FlagSet) {
	fs.StringVar(&b.mode, "boltinformer-mode", modePersistent, "stock: client-go's informers, in memory (kube-controller-manager as released); persistent: boltinformer's, in --boltinformer-cache")
	fs.StringVar(&b.cache, "boltinformer-cache", "", "the cache file of the persistent informers (typed and metadata-only), created if missing")
	fs.StringVar(&b.syncPolicy, "boltinformer-sync-policy", "fresh", "when an informer has synced after a warm start: fresh (SyncAfterFresh: equal to the server's state, what controllers need) or disk-load (SyncAfterDiskLoad: at once, possibly stale)")
	fs.DurationVar(&b.freshTimeout, "boltinformer-fresh-timeout", 0, "with --boltinformer-sync-policy fresh, report synced after this long without being fresh (0: wait)")
	fs.StringVar(&b.encryptionConfig, "boltinformer-encryption-config", "", "an EncryptionConfiguration (aesgcm providers) whose resources are encrypted at rest in the cache file, e.g. secrets")
	fs.StringVar(&b.stats, "boltinformer-stats", "", "a JSON file rewritten every second and at exit: the requests and response bytes of the controller manager's clients, by verb and resource")
}

func (b *boltFlags) validate() error {
	switch b.mode {
	case modeStock:
		if b.cache != "" {
			return errors.New("--boltinformer-cache is for --boltinformer-mode=persistent")
		}
	case modePersistent:
		if b.cache == "" {
			return errors.New("--boltinformer-mode=persistent needs --boltinformer-cache")
		}
	default:
		return fmt.Errorf("--boltinformer-mode %q: want %s or %s", b.mode, modeStock, modePersistent)
	}
	if b.syncPolicy != "fresh" && b.syncPolicy != "disk-load" {
		return fmt.Errorf("--boltinformer-sync-policy %q: want fresh or disk-load", b.syncPolicy)
	}
	if b.freshTimeout < 0 {
		return fmt.Errorf("--boltinformer-fresh-timeout %s is negative", b.freshTimeout)
	}
	return nil
}

// newCommand is kube-controller-manager's command line (every flag of
// options.KubeControllerManagerOptions) with the boltinformer flags, and a
// Run of this package's own (run).
func newCommand() *cobra.Command {
	s, err := options.NewKubeControllerManagerOptions()
	if err != nil {
		klog.Background().Error(err, "Unable to initialize command options")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	var b boltFlags
	cmd := &cobra.Command{
		Use:   "kcm",
		Short: "kube-controller-manager on client-go's or boltinformer's persistent shared informers",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			rest.SetDefaultWarningHandler(rest.NoWarnings{})
			return s.ComponentGlobalsRegistry.Set()
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			verflag.PrintAndExitIfRequested()
			if err := logsapi.ValidateAndApply(s.Logs, utilfeature.DefaultFeatureGate); err != nil {
				return err
			}
			cliflag.PrintFlags(cmd.Flags())
			if err := b.validate(); err != nil {
				return err
			}
			if s.Generic.LeaderElection.LeaderElect {
				return errors.New("kcm runs without leader election: pass --leader-elect=false")
			}
			if s.SecureServing.BindPort != 0 {
				return errors.New("kcm serves no HTTPS: pass --secure-port=0")
			}
			if s.KubeCloudShared.UseServiceAccountCredentials {
				return errors.New("kcm runs no service-account-token controller: --use-service-account-credentials is not supported")
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			c, err := s.Config(ctx, app.KnownControllers(), app.ControllersDisabledByDefault(), app.ControllerAliases())
			if err != nil {
				return err
			}
			return run(ctx, c.Complete(), &b)
		},
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	named := s.Flags(app.KnownControllers(), app.ControllersDisabledByDefault(), app.ControllerAliases())
	s.ParsedFlags = &named
	verflag.AddFlags(named.FlagSet("global"))
	globalflag.AddGlobalFlags(named.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	b.addTo(named.FlagSet("boltinformer"))
	for _, f := range named.FlagSets {
		fs.AddFlagSet(f)
	}
	cliflag.SetUsageAndHelpFunc(cmd, named, 0)
	return cmd
}
