// go-elector campaigns for a coordination.k8s.io/v1 Lease with client-go's
// tools/leaderelection, exactly as a controller-runtime manager does, and prints one JSON line
// each time it starts or stops leading. The mixed-election test runs it beside the Rust operator
// on the same Lease. It never writes anything but the Lease.
//
// After losing leadership it campaigns again with the same identity; SIGTERM/SIGINT releases the
// Lease (ReleaseOnCancel, as controller-runtime's LeaderElectionReleaseOnCancel) and exits 0.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// recordingLock remembers when the last successful write of the Lease returned, so that the
// line printed on losing leadership can state the last instant this process could still have
// believed it led (last renewal + retry period + renew deadline, client-go's renew loop).
type recordingLock struct {
	resourcelock.Interface
	mu        sync.Mutex
	lastWrite time.Time
}

func (l *recordingLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, r)
	l.written(err)
	return err
}

func (l *recordingLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, r)
	l.written(err)
	return err
}

func (l *recordingLock) written(err error) {
	if err == nil {
		l.mu.Lock()
		l.lastWrite = time.Now()
		l.mu.Unlock()
	}
}

func (l *recordingLock) last() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastWrite
}

func emit(fields map[string]any) {
	b, _ := json.Marshal(fields)
	fmt.Println(string(b))
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	namespace := flag.String("namespace", "", "namespace of the Lease")
	name := flag.String("lease-name", "135b1886.medik8s.io", "name of the Lease")
	identity := flag.String("identity", "", "holder identity (default: hostname_UUID, as controller-runtime)")
	leaseDuration := flag.Duration("lease-duration", 15*time.Second, "LeaseDuration")
	renewDeadline := flag.Duration("renew-deadline", 10*time.Second, "RenewDeadline")
	retryPeriod := flag.Duration("retry-period", 2*time.Second, "RetryPeriod")
	flag.Parse()
	if *namespace == "" {
		fmt.Fprintln(os.Stderr, "error: --namespace is required")
		os.Exit(2)
	}
	if *identity == "" {
		host, err := os.Hostname()
		if err != nil {
			host = "go-elector"
		}
		*identity = host + "_" + string(uuid.NewUUID())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	inner, err := resourcelock.New(resourcelock.LeasesResourceLock, *namespace, *name,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: *identity})
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
	lock := &recordingLock{Interface: inner}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	emit(map[string]any{"event": "campaigning", "identity": *identity, "at": time.Now().UTC()})
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   *leaseDuration,
			RenewDeadline:   *renewDeadline,
			RetryPeriod:     *retryPeriod,
			ReleaseOnCancel: true,
			Name:            *name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					emit(map[string]any{"event": "started_leading", "identity": *identity, "at": time.Now().UTC()})
				},
				OnStoppedLeading: func() {
					now := time.Now()
					until := lock.last().Add(*retryPeriod + *renewDeadline)
					if until.After(now) || ctx.Err() != nil {
						until = now
					}
					emit(map[string]any{"event": "stopped_leading", "identity": *identity, "at": now.UTC(), "until": until.UTC()})
				},
			},
		})
	}
}
