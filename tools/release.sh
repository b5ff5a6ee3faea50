#!/usr/bin/env bash
# `make release-snapshot`: builds dist/ locally, nothing is published.
#   dist/screengraph-agent_<version>_<os>_<arch>.tar.gz  linux, darwin x amd64, arm64:
#       a static binary (CGO_ENABLED=0, -trimpath, version/commit/date linked in),
#       LICENSE, README.md, the systemd unit, the default config and examples/
#       (run.json, policy-v2.yaml, walkthrough.sh)
#   dist/screengraph-agent_<version>_<arch>.deb            linux amd64, arm64 (Debian's dpkg-deb,
#       packaging/deb/: control template, maintainer scripts; no tool to install)
#   dist/SHA256SUMS                                        of all of the above
# VERSION
# defaults to the last tag (or 0.0.0) + "-snapshot+<short commit>";
# RELEASE_TARGETS (default all four) limits the os/arch pairs built: CI builds
# linux/amd64 only, since each cross build compiles every package again.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# The tools it needs, each named with the package that provides it, before
# any build starts (a missing one would otherwise fail minutes in).
for tool in go:golang dpkg-deb:dpkg tar:tar sha256sum:coreutils; do
  command -v "${tool%%:*}" >/dev/null ||
    { echo "release: FAIL: '${tool%%:*}' is not on PATH (install Debian's ${tool#*:} package: apt-get install ${tool#*:})" >&2; exit 1; }
done

# build_deb ARCH BINARY OUT: a deb with the binary, the systemd unit, the
# config (a conffile), the copyright and the maintainer scripts of
# packaging/deb, owned by root (dpkg-deb --root-owner-group), as
# deb-control(5) and Debian policy 10.7 describe.
build_deb() {
  local arch=$1 bin=$2 out=$3 r out_err
  r=$(mktemp -d dist/build/deb.XXXXXX) && chmod 0755 "$r"
  install -D -m 0755 "$bin" "$r/usr/bin/screengraph-agent"
  install -D -m 0644 packaging/systemd/screengraph-agent.service "$r/usr/lib/systemd/system/screengraph-agent.service"
  install -D -m 0644 packaging/config.yaml "$r/etc/screengraph-agent/config.yaml"
  install -D -m 0644 LICENSE "$r/usr/share/doc/screengraph-agent/copyright"
  install -D -m 0644 -t "$r/usr/share/doc/screengraph-agent/examples" examples/run.json examples/policy-v2.yaml examples/walkthrough.sh
  install -d -m 0755 "$r/DEBIAN"
  install -m 0755 packaging/deb/preinstall.sh "$r/DEBIAN/preinst"
  install -m 0755 packaging/deb/postinstall.sh "$r/DEBIAN/postinst"
  install -m 0755 packaging/deb/preremove.sh "$r/DEBIAN/prerm"
  install -m 0755 packaging/deb/postremove.sh "$r/DEBIAN/postrm"
  echo /etc/screengraph-agent/config.yaml >"$r/DEBIAN/conffiles"
  (cd "$r" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$r/DEBIAN/md5sums"
  sed -e "s|\${VERSION}|$version|" -e "s|\${ARCH}|$arch|" \
      -e "s|\${INSTALLED_SIZE}|$(du -sk --exclude=DEBIAN "$r" | cut -f1)|" packaging/deb/control >"$r/DEBIAN/control"
  # gzip, not the default xz: 6 s instead of 32 s of CPU for a 17 MB
  # instead of 13 MB package (measured on the linux/amd64 build).
  out_err=$(dpkg-deb --root-owner-group -Zgzip --build "$r" "$out" 2>&1) ||
    { echo "release: FAIL: dpkg-deb --build for $arch: $out_err" >&2; exit 1; }
  rm -rf "$r"
}
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
  # go build -v names each package it compiles (none when the build cache
  # has them all: a rebuild of an unchanged target takes seconds); a line
  # every 25 packages and one at least every 15 s keep the build from
  # looking hung (a cold cross build compiles ~300 packages: minutes).
  echo "release: building $os/$arch"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -v -trimpath -ldflags "$ldflags" -o "$dir/screengraph-agent" ./cmd/screengraph-agent 2>&1 |
    awk -v t="$os/$arch" -v s="$s" 'BEGIN {last = systime()}
      /[ :#]/ {print; fflush(); next}
      {n++; if (n % 25 == 0 || systime() - last >= 15) {printf "release: %s: %d packages compiled (%d s)\n", t, n, systime() - s; fflush(); last = systime()}}'
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "release: FAIL: go build for $os/$arch" >&2; exit 1; }
  cp LICENSE README.md packaging/systemd/screengraph-agent.service packaging/config.yaml "$dir/"
  mkdir -p "$dir/examples" && cp examples/run.json examples/policy-v2.yaml examples/walkthrough.sh "$dir/examples/"
  tar -C "$dir" -czf "dist/$name.tar.gz" --owner=0 --group=0 screengraph-agent LICENSE README.md screengraph-agent.service config.yaml examples
  echo "release: $name.tar.gz ($(( $(date +%s) - s )) s)"
  if [ "$os" = linux ]; then
    build_deb "$arch" "$dir/screengraph-agent" "dist/screengraph-agent_${version}_${arch}.deb"
    echo "release: screengraph-agent_${version}_${arch}.deb"
  fi
done
rm -rf dist/build
(cd dist && sha256sum -- *.tar.gz *.deb > SHA256SUMS)
echo "release: dist/ in $(( $(date +%s) - t0 )) s, version $version"
