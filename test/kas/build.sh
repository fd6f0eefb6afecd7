#!/usr/bin/env bash
# Builds the kas binary (kube-apiserver + etcd on 127.0.0.1) if the cache has
# none for the current sources, and prints its path on stdout.
#
#   KAS=$(test/kas/build.sh)
#   KCM=$(test/kas/build.sh kcm)      # kube-controller-manager on boltinformer (cmd/kcm)
#
# Cache: ${KAS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/boltinformer}/kas-<hash>/kas.
# A cold build takes ~6 minutes on 2 cores and ~3 GB of RAM (the linker); a
# cache hit takes a second. Needs only Go and the module proxy.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
export GOWORK=off
exec go run ./cmd/kas-build "$@"
