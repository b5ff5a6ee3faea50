#!/usr/bin/env bash
# `make release-snapshot`: builds dist/ locally, nothing is published.
#   dist/screengraph-agent_<version>_<os>_<arch>.tar.gz  linux, darwin x amd64, arm64:
#       a static binary (CGO_ENABLED=0, -trimpath, version/commit/date linked in),
#       LICENSE, README.md, the systemd unit and the default config
#   dist/screengraph-agent_<version>_<arch>.deb            linux amd64, arm64 (nfpm, packaging/nfpm.yaml)
#   dist/SHA256SUMS                                        of all of the above
# NFPM is the nfpm binary (the Makefile installs a pinned one); VERSION
# defaults to the last tag (or 0.0.0) + "-snapshot+<short commit>";
# RELEASE_TARGETS (default all four) limits the os/arch pairs built: CI builds
# linux/amd64 only, since each cross build compiles every package again.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
nfpm="${NFPM:?NFPM: the nfpm binary}"
commit=$(git rev-parse HEAD)
tag=$(git describe --tags --abbrev=0 2>/dev/null || echo v0.0.0)
version="${VERSION:-${tag#v}-snapshot+$(git rev-parse --short HEAD)}"
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w -X main.version=$version -X main.commit=$commit -X main.date=$date"
rm -rf dist && mkdir -p dist/build
t0=$(date +%s)
for target in ${RELEASE_TARGETS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}; do
  os=${target%/*} arch=${target#*/}
  name="screengraph-agent_${version}_${os}_${arch}"
  dir="dist/build/$name"
  mkdir -p "$dir"
  s=$(date +%s)
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$dir/screengraph-agent" ./cmd/screengraph-agent
  cp LICENSE README.md packaging/systemd/screengraph-agent.service packaging/config.yaml "$dir/"
  tar -C "$dir" -czf "dist/$name.tar.gz" --owner=0 --group=0 screengraph-agent LICENSE README.md screengraph-agent.service config.yaml
  echo "release: $name.tar.gz ($(( $(date +%s) - s )) s)"
  if [ "$os" = linux ]; then
    sed "s|\${BINARY}|$dir/screengraph-agent|" packaging/nfpm.yaml >"dist/build/nfpm-$arch.yaml"
    VERSION="$version" ARCH="$arch" "$nfpm" package --config "dist/build/nfpm-$arch.yaml" \
      --packager deb --target "dist/screengraph-agent_${version}_${arch}.deb" >/dev/null
    echo "release: screengraph-agent_${version}_${arch}.deb"
  fi
done
rm -rf dist/build
(cd dist && sha256sum -- *.tar.gz *.deb > SHA256SUMS)
echo "release: dist/ in $(( $(date +%s) - t0 )) s, version $version"
