#!/usr/bin/env bash
# mmdebstrap --setup-hook: runs before any package is installed.
#   $1: the new root; OUTPOST_IMAGE_DIR, OUTPOST_ARCH from build.sh.
# The initramfs settings must be in place before linux-image-* builds the first initramfs.
set -euo pipefail
root="$1"
cp -a "${OUTPOST_IMAGE_DIR}/bootstrap-overlay/." "${root}/"
mkdir -p "${root}/usr/share/initramfs-tools/modules.d"
grep -v '^#' "${OUTPOST_IMAGE_DIR}/modules.${OUTPOST_ARCH}" \
  > "${root}/usr/share/initramfs-tools/modules.d/outpost"
if [ "${OUTPOST_ARCH}" = arm64 ]; then
  # raspi-firmware's kernel hook writes /boot/firmware (we replace config.txt and cmdline.txt
  # at staging time, see build.sh).
  mkdir -p "${root}/boot/firmware"
fi
