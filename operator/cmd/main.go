// Command manager is the Cellstore operator: it runs the StoreCluster and region-assignment
// controllers (docs/operator.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	"github.com/cellstore/cellstore/config/crd/bases"
	"github.com/cellstore/cellstore/operator/api/v1alpha1"
	"github.com/cellstore/cellstore/operator/internal/controller"
	"github.com/cellstore/cellstore/operator/internal/crds"
	"github.com/cellstore/cellstore/operator/internal/master"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// version is set at build time (-ldflags "-X main.version=v0.1.0").
var version = ""

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cellstore-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		metricsAddr     string
		probeAddr       string
		leaderElect     bool
		leaderElectNS   string
		watchNamespaces string
		pollInterval    time.Duration
		resyncInterval  time.Duration
		masterTimeout   time.Duration
		applyCRDs       bool
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint (0 disables it)")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	flag.BoolVar(&leaderElect, "leader-elect", true, "elect a leader through a Lease, so that only one replica of the operator acts")
	flag.StringVar(&leaderElectNS, "leader-election-namespace", "", "namespace of the leader election Lease (default: the operator's own namespace when in a cluster)")
	flag.StringVar(&watchNamespaces, "watch-namespaces", "", "comma-separated namespaces whose StoreClusters the operator manages (empty: all)")
	flag.DurationVar(&pollInterval, "poll-interval", 5*time.Second, "how often a changing StoreCluster (provisioning, draining, restarting) is looked at")
	flag.DurationVar(&resyncInterval, "resync-interval", 60*time.Second, "how often a settled StoreCluster is looked at (status, zones, quotas)")
	flag.DurationVar(&masterTimeout, "master-timeout", 10*time.Second, "timeout of each call to a Cellstore master")
	flag.BoolVar(&applyCRDs, "apply-crds", false, "apply the operator's CustomResourceDefinitions (server-side), wait until they are served, and exit: the chart's pre-install/pre-upgrade hook")
	zopts := zap.Options{}
	zopts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zopts)))
	logger := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	var namespaces []string
	for _, ns := range strings.Split(watchNamespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			namespaces = append(namespaces, ns)
		}
	}

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("no Kubernetes API to talk to (in a pod the service account is used; outside, set KUBECONFIG): %w", err)
	}
	if applyCRDs {
		return runApplyCRDs(cfg, logger)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:        probeAddr,
		LeaderElection:                leaderElect,
		LeaderElectionID:              "cellstore-operator.cellstore.io",
		LeaderElectionNamespace:       leaderElectNS,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controller.CacheOptions(namespaces),
	})
	if err != nil {
		if leaderElect && leaderElectNS == "" {
			return fmt.Errorf("start the manager: %w (outside a cluster pass --leader-election-namespace=NS or --leader-elect=false)", err)
		}
		return fmt.Errorf("start the manager: %w", err)
	}
	opts := controller.DefaultOptions()
	opts.Masters = master.NewEngine(mgr.GetAPIReader())
	opts.OperatorVersion = operatorVersion()
	opts.PollInterval, opts.ResyncInterval, opts.MasterTimeout = pollInterval, resyncInterval, masterTimeout
	if err := controller.Setup(mgr, opts); err != nil {
		return fmt.Errorf("set up the controllers: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("the cache has not synced yet")
		}
		return nil
	}); err != nil {
		return err
	}
	logger.Info("starting", "version", opts.OperatorVersion, "namespaces", namespaces, "leaderElection", leaderElect)
	return mgr.Start(ctrl.SetupSignalHandler())
}

var labelValue = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// operatorVersion is the build's version as a label value.
func operatorVersion() string {
	v := version
	if v == "" {
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		} else {
			v = "dev"
		}
	}
	v = strings.Trim(labelValue.ReplaceAllString(v, "_"), "._-")
	if len(v) > 63 {
		v = strings.Trim(v[:63], "._-")
	}
	if v == "" {
		v = "dev"
	}
	return v
}

// runApplyCRDs applies the embedded CRDs and returns once the API server serves them.
func runApplyCRDs(cfg *rest.Config, logger logr.Logger) error {
	defs, err := crds.Load(bases.FS)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctrl.SetupSignalHandler(), 5*time.Minute)
	defer cancel()
	if err := crds.Apply(ctx, c, defs, 2*time.Minute, func(msg string) { logger.Info(msg) }); err != nil {
		return fmt.Errorf("%w (the operator's service account needs create and patch on customresourcedefinitions: the chart's hook grants it)", err)
	}
	return nil
}
