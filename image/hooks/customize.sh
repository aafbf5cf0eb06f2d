#!/usr/bin/env bash
# mmdebstrap --customize-hook: runs after every package is installed (the cached bootstrap).
#   $1: the new root.
set -euo pipefail
root="$1"
# SSH host keys are made on the device's first boot (onto the data partition), never shared
# by every card flashed from one image.
rm -f "${root}"/etc/ssh/ssh_host_*
# Nothing on the device downloads packages.
rm -rf "${root}"/var/lib/apt/lists/* "${root}"/var/cache/apt/*.bin "${root}"/var/cache/apt/archives/*.deb
rm -rf "${root}"/var/log/*.log "${root}"/var/log/apt/* "${root}"/tmp/* "${root}"/root/.cache
# machine-id: made on the first boot (see build.sh: /etc/machine-id is a symlink into /var).
rm -f "${root}/etc/machine-id" "${root}/var/lib/dbus/machine-id"
# Kernel modules a headless gateway never loads (sound, cameras and TV cards, InfiniBand,
# staging drivers): about a quarter of the root. The initramfs has its own short list.
prune=(sound drivers/media drivers/infiniband drivers/staging drivers/comedi drivers/target
       drivers/isdn drivers/iio)
[ "${OUTPOST_ARCH}" = amd64 ] && prune+=(drivers/gpu)  # the Pi keeps vc4 for its HDMI console
for kdir in "${root}"/lib/modules/*; do
  for sub in "${prune[@]}"; do rm -rf "${kdir}/kernel/${sub}"; done
  chroot "${root}" depmod -a "$(basename "${kdir}")"
done
