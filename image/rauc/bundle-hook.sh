#!/bin/sh
# RAUC bundle hook of an outpost bundle (manifest: [hooks] filename=hook.sh, and
# hooks=post-install on the rootfs image). Runs on the device, from the mounted bundle, after
# RAUC wrote the new root file system into the inactive slot and mounted it read-write at
# $RAUC_SLOT_MOUNT_POINT.
#
# How this works: an image build makes a new random MBR disk id, and its /etc/fstab and
# /etc/rauc/system.conf name partitions by it; a device keeps the disk id it was flashed with.
# So the hook rewrites the build's disk id (/usr/lib/outpost/release: DISK_ID) into the
# device's (from root=PARTUUID=<disk id>-0N on the running kernel's command line) in the new
# slot, then puts the slot's kernel, initrd, device trees and command line into
# slot-<a|b>/ on the boot partition, where the boot selection (config.txt / tryboot.txt on a
# Raspberry Pi, see /usr/libexec/outpost/rauc-tryboot; EFI/BOOT/grub.cfg on amd64, which
# reads the command line from slot-<a|b>/cmdline.cfg) finds them. /var is never touched.
#
# OUTPOST_BOOT_DIR (a directory used as the boot partition) and OUTPOST_CMDLINE (instead of
# /proc/cmdline) exist for the tests.
set -eu

case "${1:-}" in
  slot-post-install) ;;
  *) exit 0 ;;
esac
[ "${RAUC_SLOT_CLASS:-}" = rootfs ] || exit 0

mnt="${RAUC_SLOT_MOUNT_POINT:?}"
slot="$(echo "${RAUC_SLOT_BOOTNAME:?}" | tr 'AB' 'ab')"
case "${slot}" in a) part=02 ;; b) part=03 ;; *) echo "unknown boot name ${RAUC_SLOT_BOOTNAME}" >&2; exit 1 ;; esac

device_disk="$(sed -n 's/.*root=PARTUUID=\([0-9a-f]\{8\}\)-0[23].*/\1/p' "${OUTPOST_CMDLINE:-/proc/cmdline}")"
[ -n "${device_disk}" ] || { echo "no root=PARTUUID=<disk id>-0N on the kernel command line" >&2; exit 1; }
. "${mnt}/usr/lib/outpost/release"  # VERSION BUILD DISK_ID ARCH COMPATIBLE
for file in etc/fstab etc/rauc/system.conf; do
  sed -i "s/${DISK_ID}/${device_disk}/g" "${mnt}/${file}"
done

# The boot partition is mounted read-only on /boot/firmware: remounted read-write for the
# copy and read-only again when the hook ends (a second mount of a mounted partition would
# share its read-only superblock); mounted on a private directory if it is not mounted.
if [ -n "${OUTPOST_BOOT_DIR:-}" ]; then
  fat="${OUTPOST_BOOT_DIR}"
elif mountpoint -q /boot/firmware; then
  fat=/boot/firmware
  mount -o remount,rw "${fat}"
  trap 'sync; mount -o remount,ro /boot/firmware' EXIT
else
  fat="$(mktemp -d)"
  trap 'umount "${fat}" 2>/dev/null; rmdir "${fat}"' EXIT
  mount -t vfat -o rw,umask=0077 "/dev/disk/by-partuuid/${device_disk}-01" "${fat}"
fi
dest="${fat}/slot-${slot}"
rm -rf "${dest}.new" && mkdir -p "${dest}.new"
kernel="$(find "${mnt}/boot" -maxdepth 1 -name 'vmlinuz-*' | sort -V | tail -n1)"
kver="${kernel##*/vmlinuz-}"
cp "${kernel}" "${dest}.new/vmlinuz"
cp "${mnt}/boot/initrd.img-${kver}" "${dest}.new/initrd.img"
if [ -d "${mnt}/usr/lib/linux-image-${kver}/broadcom" ]; then
  find "${mnt}/usr/lib/linux-image-${kver}/broadcom" -name 'bcm27*.dtb' -exec cp -t "${dest}.new" {} +
fi
sed -e "s/@ROOT@/PARTUUID=${device_disk}-${part}/" -e "s/@SLOT@/${RAUC_SLOT_BOOTNAME}/" \
  "${mnt}/usr/lib/outpost/boot/cmdline.txt.in" > "${dest}.new/cmdline.txt"
if [ -f "${fat}/EFI/BOOT/grub.cfg" ]; then  # amd64: GRUB reads the command line from here
  printf 'set cmdline="%s"\n' "$(cat "${dest}.new/cmdline.txt")" > "${dest}.new/cmdline.cfg"
fi
rm -rf "${dest}" && mv "${dest}.new" "${dest}"
sync
echo "outpost hook: slot ${RAUC_SLOT_BOOTNAME}: ${VERSION} build ${BUILD}, kernel ${kver}, disk ${device_disk}"
