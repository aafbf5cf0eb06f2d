#!/bin/sh
# Print RAUC's /etc/rauc/system.conf for an outpost image:
#   system-conf.sh ARCH COMPATIBLE DISK_ID COMMENT
# Slots: the root file systems A (partition 2) and B (partition 3) by PARTUUID (<disk id>-0N).
# Boot selection: on the Raspberry Pi (arm64) the firmware's tryboot through RAUC's custom
# backend (/usr/libexec/outpost/rauc-tryboot); on amd64 RAUC's grub backend, which sets
# ORDER / X_OK / X_TRY in the grubenv on the boot partition with grub-editenv (the image's
# /usr/local/sbin/grub-editenv remounts /boot/firmware read-write around the real one).
# The status file is RAUC's own bookkeeping on the data partition (the root is read-only).
set -eu
arch="$1" compatible="$2" disk="$3" comment="$4"
case "${arch}" in
  arm64) bootloader=custom ;;
  amd64) bootloader=grub ;;
  *) echo "system-conf.sh: unknown ARCH ${arch}" >&2; exit 1 ;;
esac
cat <<EOF
# ${comment}: the A/B root slots (image/README.md, "Updating devices").
# Disk ${disk}: an update's bundle hook rewrites it to the device's own disk id.
[system]
compatible=${compatible}
bootloader=${bootloader}
bundle-formats=-plain
mountprefix=/run/rauc
statusfile=/var/lib/rauc/status.raucs
EOF
if [ "${bootloader}" = grub ]; then
  echo "grubenv=/boot/firmware/EFI/BOOT/grubenv"
fi
cat <<EOF

[keyring]
path=/etc/rauc/keyring.pem
use-bundle-signing-time=true
EOF
if [ "${bootloader}" = custom ]; then
  printf '\n[handlers]\nbootloader-custom-backend=/usr/libexec/outpost/rauc-tryboot\n'
fi
cat <<EOF

[slot.rootfs.0]
device=/dev/disk/by-partuuid/${disk}-02
type=ext4
bootname=A

[slot.rootfs.1]
device=/dev/disk/by-partuuid/${disk}-03
type=ext4
bootname=B
EOF
