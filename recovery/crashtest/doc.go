// Package crashtest is a test kit for restart-resilience tests of agents
// built on boltinformer (and of boltinformer itself): a fake API server
// with a known history, a deterministic history generator, a kill/restart
// harness, and checks of a cache file against the truth.
//
// Source is a deterministic, in-memory API server for one resource: a
// cache.ListerWatcher with a full event history, resourceVersions,
// paginated lists, watches that resume from a resourceVersion, bookmarks,
// compaction (a watch from a compacted resourceVersion gets 410 Expired,
// like kube-apiserver), "too large resource version" errors and outages.
// Because its history is known, a test can check a cache against the
// truth at any resourceVersion (Source.StateAt). NewSourceAt starts one
// from a snapshot, as a server that has been running for a while.
//
// History is H(seed): an unbounded history of changes whose event i
// (resourceVersion i) is a pure function of the seed and i. Processes that
// share a seed agree on every event and every state without talking:
// History.StateAt(rv) is the truth for any resourceVersion a file holds,
// History.Source(base, k) rebuilds the server as of k, and
// History.Events(k, n) are the events k+1 through n, to append live
// (Source.Apply).
//
// Its objects are Pods, or your agent's own kind: HistoryOptions.Object
// makes the version of a key an event writes from an ObjectSpec (the key,
// the event, a pseudo-random number of the seed and the event), as a pure
// function, and the History sets the metadata. A custom resource's typed
// struct (registered in a scheme; give the scheme to the informer as
// InformerOptions.Scheme and to VerifyOptions.Scheme) or unstructured
// objects:
//
//	h := crashtest.NewHistory(1, &crashtest.HistoryOptions{
//		Object: func(o crashtest.ObjectSpec) runtime.Object {
//			return &examplev1.Widget{
//				TypeMeta: metav1.TypeMeta{APIVersion: "example.com/v1", Kind: "Widget"},
//				Spec:     examplev1.WidgetSpec{Color: colors[o.Rand%4]},
//			}
//		},
//		NewList: func() runtime.Object { return &examplev1.WidgetList{} },
//	})
//
// Run is the kill/restart harness. It re-executes the test binary
// (os.Args[0] -test.run=^TestName$) with an environment variable that
// makes the same Run call run Config.Child in the child; the parent kills
// each child with SIGKILL at the instant its Plan says (a delay after the
// start, or after a mark the child wrote with Env.Mark: "in a commit",
// "relisting", "backfilling"), restarts the next one, and calls
// Config.Check between runs with the child dead. A final run may be left
// to finish (Config.Final). Children die with the parent and are always
// waited for. A minimal use:
//
//	func TestAgentSurvivesKills(t *testing.T) {
//		var dir string
//		if !crashtest.IsChild() {
//			dir = t.TempDir()
//		}
//		h := crashtest.NewHistory(1, nil)
//		crashtest.Run(t, crashtest.Config{
//			Kills: 50, Final: true, Seed: 1, Dir: dir, MaxDelay: time.Second,
//			Child: func(ctx context.Context, env *crashtest.Env) error {
//				src := h.Source(0, 1000)
//				// open boltinformer in env.Dir, run the agent over src,
//				// append h.Events(1000, 5000) with src.Apply, env.Mark(...);
//				// if !env.Final, wait for ctx (the kill) before returning.
//				return runAgent(ctx, env, src)
//			},
//			Check: func(t testing.TB, r *crashtest.Result) {
//				// With your own kind: &crashtest.VerifyOptions{Example:
//				// &examplev1.Widget{}, Scheme: scheme, Indexers: ...}.
//				_, err := crashtest.VerifyFile(filepath.Join(dir, "cache.db"), "pods", h.StateAt, nil)
//				if err != nil {
//					t.Fatalf("after run %d: %v", r.Run, err)
//				}
//			},
//		})
//	}
//
// VerifyFile (and VerifyDB on an open store) check invariant 1 of
// docs/ARCHITECTURE.md, the atomic resume point: the file opens,
// store.DB.Check is clean, and the objects on disk are exactly the truth at
// the saved resourceVersion, index values included. Compare checks an
// in-memory cache the same way.
//
// Handler serves Sources over HTTP as a Kubernetes API, for agents whose
// informers come from a rest.Config (a boltinformer.Factory): a restart
// test then runs the agent's own wiring (examples/edge-agent does). The kit
// itself never opens a network connection: a test serves the Handler on
// 127.0.0.1 (httptest). recovery's crash loop test
// (crashloop_test.go) is the complete example; docs/RELIABILITY.md
// describes what it proves.
package crashtest
