#!/usr/bin/env bash
# The demo: starts a real kube-apiserver + etcd on 127.0.0.1 (test/kas),
# seeds Pods, ConfigMaps and Secrets, runs examples/edge-agent cold, changes
# objects while it is down, restarts it warm, and prints cold vs warm start
# times and the LIST requests each start made.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
export GOWORK=off
KAS_BINARY="$(test/kas/build.sh)"
export KAS_BINARY
exec go -C test/kas run ./cmd/demo "$@"
