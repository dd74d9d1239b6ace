#!/usr/bin/env bash
# Makes the base image debian:bookworm-slim locally, for engines that cannot pull it: debootstrap
# (minbase) from the Debian mirror this machine's apt uses, trimmed like Debian's slim images, and
# imported with `docker import`. Does nothing when the engine already has that image.
#
# Usage: make_base_image.sh [TAG]   (default debian:bookworm-slim)
set -euo pipefail

tag="${1:-debian:bookworm-slim}"
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "make_base_image: $tag is already there"
  exit 0
fi

# The first http(s) mirror of each archive in this machine's apt sources (deb822 or one-line).
mirror_of() {
  local suite_pattern="$1" fallback="$2"
  local found
  found="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
             2>/dev/null | awk -v want="$suite_pattern" '
    /^deb / && $0 ~ want { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }
    /^URIs:/ { uri = $2 }
    /^Suites:/ && $0 ~ want && uri != "" { print uri; exit }' || true)"
  echo "${found:-$fallback}"
}
mirror="$(mirror_of ' bookworm( |$)' http://deb.debian.org/debian)"
security="$(mirror_of 'bookworm-security' http://deb.debian.org/debian-security)"

root="$(mktemp -d /tmp/ledgerd-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT
echo "make_base_image: debootstrap --variant=minbase bookworm from $mirror"
debootstrap --variant=minbase bookworm "$root/rootfs" "$mirror" >"$root/debootstrap.log" 2>&1 || {
  tail -20 "$root/debootstrap.log" >&2
  exit 1
}

rootfs="$root/rootfs"
# The same archives as the host, so the image's libraries are the versions the host builds with.
cat >"$rootfs/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
SOURCES
# Slim, as Debian's own slim images: no manuals, documentation or translations, now or later.
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim" <<'SLIM'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
SLIM
find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/var/lib/apt/lists/* \
  "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/log/*.log
find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
# apt in a container: no recommends, and no cached .debs left in a layer.
cat >"$rootfs/etc/apt/apt.conf.d/docker-slim" <<'APT'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
APT

tar --numeric-owner -C "$rootfs" -c . |
  docker import --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' - "$tag" >/dev/null
echo "make_base_image: imported $tag ($(docker image inspect -f '{{.Size}}' "$tag") bytes)"
