#!/usr/bin/env bash
# Build outpost-<version>-<arch>.img: a flashable disk image (MBR) for a Raspberry Pi (arm64)
# or an x86 machine / QEMU (amd64). Run as root (mmdebstrap, chroot, file ownership):
#
#   make image                 # arm64 (Raspberry Pi 3 / 4 / 400 / CM4 / Zero 2 W)
#   make image ARCH=amd64      # the x86 twin the tests boot
#
# Layers, each cached under image/.cache/<arch>/ and keyed by what goes into it:
#   1. root-<key>.tar   mmdebstrap bookworm root (key: package lists, module list, hooks,
#                       bootstrap-overlay/). Minutes (arm64 under qemu-user: longer).
#   2. venv-<key>.tar   /opt/outpost/venv with the dependencies (key: layer 1 + pyproject
#                       dependencies). Wheels from PyPI for the target.
#   3. every build      outpost's own wheel, the units, the overlay, the file systems. Seconds.
# Next to the image it writes outpost-<version>-<arch>.raucb, the signed RAUC bundle of the same
# root file system, for A/B updates of devices already in the field (image/README.md,
# "Updating devices"). Signing: RAUC_CERT + RAUC_KEY (files or PKCS#11 URLs) and RAUC_KEYRING
# (the CA the devices trust), or else a development CA and key made once in image/keys/.
# The file systems are made from directory trees (mke2fs -d, mkfs.vfat + mcopy) and laid
# into the disk image by genimage: no loop device, no mount. See image/README.md.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "${here}")"
ARCH="${ARCH:-arm64}"
SUITE="${SUITE:-bookworm}"
CACHE="${IMAGE_CACHE:-${here}/.cache}"
OUT_DIR="${IMAGE_OUT:-${repo}}"
BOOT_MIB="${BOOT_MIB:-256}"      # FAT: kernels and initrds of both slots, firmware
ROOT_MIB="${ROOT_MIB:-1280}"     # each root slot (A and B)
DATA_MIB="${DATA_MIB:-384}"      # /var as built; grown to the end of the card on first boot
ALIGN_MIB=4                      # SD erase blocks
VENV=/opt/outpost/venv
KEY_DIR="${RAUC_KEY_DIR:-${here}/keys}"   # development signing keys (git-ignored)

log() { printf '[image %s %(%T)T] %s\n' "${ARCH}" -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

case "${ARCH}" in
  amd64) machine=x86_64 ;;
  arm64) machine=aarch64 ;;
  *) die "ARCH must be arm64 or amd64, not ${ARCH}" ;;
esac
[ "$(id -u)" = 0 ] || die "run as root (mmdebstrap, chroot and file ownership need it)"
for tool in mmdebstrap mke2fs mkfs.vfat mcopy genimage python3 rauc mksquashfs openssl; do
  command -v "${tool}" >/dev/null || die "${tool} is missing: run 'make image-packages'"
done
if [ "${ARCH}" = amd64 ]; then  # GRUB for EFI, built here from Debian's grub-efi-amd64-bin
  for tool in grub-mkimage grub-editenv; do
    command -v "${tool}" >/dev/null || die "${tool} is missing: run 'make image-packages'"
  done
  [ -d "${GRUB_MODULES:=/usr/lib/grub/x86_64-efi}" ] \
    || die "no GRUB EFI modules in ${GRUB_MODULES}: run 'make image-packages' (grub-efi-amd64-bin)"
fi

VERSION="$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "${repo}/pyproject.toml")"
IMAGE="${OUT_DIR}/outpost-${VERSION}-${ARCH}.img"
BUNDLE="${OUT_DIR}/outpost-${VERSION}-${ARCH}.raucb"
# The bundle's version: the project's plus a build id (UTC time and commit; BUILD_ID overrides).
BUILD_ID="${BUILD_ID:-$(date -u +%Y%m%d%H%M%S).$(git -C "${repo}" rev-parse --short HEAD 2>/dev/null || echo nogit)}"
case "${ARCH}" in  # RAUC's compatible: a bundle installs only on the board family it names
  amd64) COMPATIBLE=outpost-x86-64 ;;
  arm64) COMPATIBLE=outpost-raspberrypi-arm64 ;;
esac
cache="${CACHE}/${ARCH}"
work="${cache}/work"
mkdir -p "${cache}"

# -- foreign architecture: qemu-user through binfmt_misc ----------------------------------
ensure_binfmt() {
  [ "$(uname -m)" = "${machine}" ] && return 0
  if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  fi
  if [ ! -e "/proc/sys/fs/binfmt_misc/qemu-${machine}" ]; then
    update-binfmts --enable "qemu-${machine}" >/dev/null 2>&1 || true
  fi
  [ -e "/proc/sys/fs/binfmt_misc/qemu-${machine}" ] \
    || die "no binfmt_misc entry for qemu-${machine}: install qemu-user-static binfmt-support"
}

# Run a command inside the staged root: private mount namespace, /dev /proc /sys bound in,
# all gone when the command ends.
in_root() {
  local root="$1"; shift
  # shellcheck disable=SC2016  # expanded by the inner sh
  unshare --mount --fork -- sh -c '
    root="$1"; shift
    mount --rbind /dev "$root/dev" && mount -t proc proc "$root/proc" \
      && mount -t sysfs sysfs "$root/sys" && mount -t tmpfs tmpfs "$root/tmp" \
      && exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
           HOME=/root LC_ALL=C.UTF-8 "$@"' sh "${root}" "$@"
}

hash_of() { cat "$@" | sha256sum | cut -c1-16; }

# -- bundle signing: a real key, or the development CA made on first use ---------------------
signing_keys() {  # sets sign_cert, sign_key, keyring
  if [ -n "${RAUC_CERT:-}${RAUC_KEY:-}${RAUC_KEYRING:-}" ]; then
    [ -n "${RAUC_CERT:-}" ] && [ -n "${RAUC_KEY:-}" ] && [ -n "${RAUC_KEYRING:-}" ] \
      || die "RAUC_CERT, RAUC_KEY and RAUC_KEYRING are set together (image/README.md)"
    sign_cert="${RAUC_CERT}" sign_key="${RAUC_KEY}" keyring="${RAUC_KEYRING}"
    return
  fi
  sign_cert="${KEY_DIR}/signing.cert.pem" sign_key="${KEY_DIR}/signing.key.pem"
  keyring="${KEY_DIR}/ca.cert.pem"
  [ -f "${sign_cert}" ] && [ -f "${sign_key}" ] && [ -f "${keyring}" ] && return
  log "no signing key: making a development CA and signing key in ${KEY_DIR} (never ship these)"
  "${here}/rauc/dev-keys.sh" "${KEY_DIR}"
}

# -- layer 1: the bootstrapped root --------------------------------------------------------
packages() { grep -hv '^\s*#' "${here}/packages.common" "${here}/packages.${ARCH}" | xargs; }
bootstrap_key="$(
  { echo "${ARCH} ${SUITE}"; packages
    find "${here}/bootstrap-overlay" "${here}/hooks" -type f -print0 | sort -z \
      | xargs -0 sha256sum | sed "s#${here}/##"
    cat "${here}/modules.${ARCH}"; } | sha256sum | cut -c1-16)"
root_tar="${cache}/root-${bootstrap_key}.tar"

bootstrap() {
  ensure_binfmt
  local mirrors=() line
  while IFS= read -r line; do mirrors+=("${line}"); done \
    < <(python3 "${here}/mirror.py" "${SUITE}" "main non-free-firmware")
  log "bootstrapping ${SUITE} (${ARCH}) from ${mirrors[0]#deb }: $(packages)"
  local started=${SECONDS}
  OUTPOST_IMAGE_DIR="${here}" OUTPOST_ARCH="${ARCH}" mmdebstrap \
    --mode=root --format=tar --variant=minbase --architectures="${ARCH}" \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --include="$(packages | tr ' ' ',')" \
    --setup-hook="${here}/hooks/setup.sh \"\$1\"" \
    --customize-hook="${here}/hooks/customize.sh \"\$1\"" \
    "${SUITE}" "${root_tar}.part" "${mirrors[@]}"
  mv "${root_tar}.part" "${root_tar}"
  find "${cache}" -maxdepth 1 -name 'root-*.tar' ! -name "$(basename "${root_tar}")" -delete
  log "bootstrap done in $((SECONDS - started)) s"
}

# -- layer 2: the venv with the dependencies -------------------------------------------------
requirements() {  # the device's requirements: exactly pyproject.toml's [project] dependencies
  python3 - "${repo}/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["dependencies"]))
PY
}
venv_key="$( { echo "${bootstrap_key}"; requirements; } | sha256sum | cut -c1-16)"
venv_tar="${cache}/venv-${venv_key}.tar"

# Wheels that run on bookworm (glibc 2.36): every manylinux tag up to 2.36, and pure ones.
pip_target=(--only-binary=:all: --python-version 3.11 --implementation cp
            --abi cp311 --abi abi3 --abi none --platform "manylinux2014_${machine}")
for glibc in $(seq 17 36); do pip_target+=(--platform "manylinux_2_${glibc}_${machine}"); done

extract_root() {
  rm -rf "${work}"
  mkdir -p "${work}/root"
  tar -xf "${root_tar}" -C "${work}/root"
}

build_venv() {
  log "venv: downloading wheels for ${machine}"
  extract_root
  local wheels="${work}/root/opt/outpost/wheels"
  mkdir -p "${wheels}"
  requirements > "${wheels}/requirements.txt"
  python3 -m pip download -q --disable-pip-version-check "${pip_target[@]}" \
    -d "${wheels}" -r "${wheels}/requirements.txt"
  log "venv: installing $(find "${wheels}" -name '*.whl' | wc -l) wheels into ${VENV}"
  in_root "${work}/root" python3 -m venv --system-site-packages "${VENV}"
  in_root "${work}/root" "${VENV}/bin/pip" install -q --disable-pip-version-check \
    --no-index --find-links /opt/outpost/wheels -r /opt/outpost/wheels/requirements.txt
  rm -rf "${wheels}"
  tar -cf "${venv_tar}.part" -C "${work}/root" opt/outpost
  mv "${venv_tar}.part" "${venv_tar}"
  find "${cache}" -maxdepth 1 -name 'venv-*.tar' ! -name "$(basename "${venv_tar}")" -delete
}

# -- layer 3: stage the trees of the three file systems --------------------------------------
install_rauc() {  # RAUC's system.conf, the keyring and the release facts the bundle hook reads
  local root="$1" disk_id="$2"
  mkdir -p "${root}/etc/rauc" "${root}/var/lib/rauc" "${root}/usr/lib/outpost"
  install -m 0644 "${keyring}" "${root}/etc/rauc/keyring.pem"
  "${here}/rauc/system-conf.sh" "${ARCH}" "${COMPATIBLE}" "${disk_id}" \
    "outpost image ${VERSION} (${ARCH}), build ${BUILD_ID}" > "${root}/etc/rauc/system.conf"
  cat > "${root}/usr/lib/outpost/release" <<EOF
VERSION=${VERSION}
BUILD=${BUILD_ID}
DISK_ID=${disk_id}
ARCH=${ARCH}
COMPATIBLE=${COMPATIBLE}
EOF
}

outpost_wheel() {  # build outpost's wheel from a copy of the sources (nothing left in the repo)
  local src="${work}/src"
  rm -rf "${src}" && mkdir -p "${src}"
  (cd "${repo}" && tar -cf - --exclude=__pycache__ --exclude='*.pyc' pyproject.toml README.md \
     outpost gateway bridge storage cloud_spark) | tar -xf - -C "${src}"
  python3 -m pip wheel -q --disable-pip-version-check --no-deps -w "${work}/dist" "${src}" \
    >/dev/null
  find "${work}/dist" -name 'outpost-*.whl' | head -n1
}

install_systemd_files() {  # systemd/ from the repository, as the image's vendor files
  local root="$1" sd="${repo}/systemd"
  install -m 0644 -t "${root}/usr/lib/systemd/system" "${sd}"/*.service "${sd}"/*.path
  local dir dest
  for dir in sysusers.d tmpfiles.d journald.conf.d; do
    [ -d "${sd}/${dir}" ] || continue
    case "${dir}" in
      journald.conf.d) dest="${root}/usr/lib/systemd/journald.conf.d" ;;
      *) dest="${root}/usr/lib/${dir}" ;;
    esac
    mkdir -p "${dest}"
    find "${sd}/${dir}" -maxdepth 1 -name '*.conf' -exec install -m 0644 -t "${dest}" {} +
  done
}

# GRUB as one EFI executable with the modules grub.cfg needs built in: nothing of GRUB's is
# read from a module directory at boot. The prefix has no device, so GRUB takes the partition
# it was loaded from and reads ${prefix}/grub.cfg there.
GRUB_EFI_MODULES="normal configfile echo test true loadenv linux gzio part_msdos part_gpt fat
  serial terminal efi_gop all_video sleep reboot"
grub_efi() {
  # shellcheck disable=SC2086  # the module list is words
  grub-mkimage --format=x86_64-efi --directory="${GRUB_MODULES}" --prefix=/EFI/BOOT \
    --output="$1" ${GRUB_EFI_MODULES}
}

stage() {
  local root="${work}/root" data="${work}/data" boot="${work}/boot"
  local disk_id="$1"
  log "staging the root (layer 1 ${bootstrap_key}, layer 2 ${venv_key})"
  extract_root
  tar -xf "${venv_tar}" -C "${root}"
  local wheel; wheel="$(outpost_wheel)"
  cp "${wheel}" "${root}/opt/outpost/"
  in_root "${root}" "${VENV}/bin/pip" install -q --disable-pip-version-check --no-deps \
    --no-index --force-reinstall "/opt/outpost/$(basename "${wheel}")"
  rm -f "${root}/opt/outpost/$(basename "${wheel}")"
  ln -sf "${VENV}/bin/outpost" "${root}/usr/local/bin/outpost"

  install_systemd_files "${root}"
  cp -a "${here}/overlay/." "${root}/"
  if [ -d "${here}/overlay.${ARCH}" ]; then cp -a "${here}/overlay.${ARCH}/." "${root}/"; fi
  install_rauc "${root}" "${disk_id}"
  chmod 0755 "${root}/usr/libexec/outpost/"*
  systemd-sysusers --root="${root}" >/dev/null 2>&1
  local gid; gid="$(awk -F: '$1 == "outpost" {print $3}' "${root}/etc/group")"
  [ -n "${gid}" ] || die "systemd-sysusers made no outpost group (systemd/sysusers.d)"
  systemd-tmpfiles --root="${root}" --create /usr/lib/tmpfiles.d/outpost.conf 2>/dev/null || true

  # The writable bits of /etc live on the data partition, under /var/lib/outpost-etc.
  local etc=/var/lib/outpost-etc
  mkdir -p "${root}${etc}/network" "${root}${etc}/ssh" "${root}${etc}/outpost"
  echo outpost > "${root}${etc}/hostname"
  ln -sfn "${etc}/machine-id" "${root}/etc/machine-id"
  ln -sfn "${etc}/hostname" "${root}/etc/hostname"
  rm -rf "${root}/etc/systemd/network" && ln -sfn "${etc}/network" "${root}/etc/systemd/network"
  install -d -m 0750 -o 0 -g "${gid}" "${root}/etc/outpost"
  ln -sfn "${etc}/outpost/outpost.toml" "${root}/etc/outpost/outpost.toml"
  # Group-writable (and set-group-id: what is made there stays group outpost) so that the
  # service can rewrite outpost.toml and the files beside it (the unit's image.conf drop-in).
  chgrp "${gid}" "${root}${etc}/outpost" && chmod 2770 "${root}${etc}/outpost"
  install -m 0640 -g "${gid}" "${root}/usr/share/outpost/outpost.toml" \
    "${root}${etc}/outpost/outpost.toml"
  if [ "${ARCH}" = arm64 ]; then
    ln -sfn "${etc}/wpa_supplicant-wlan0.conf" \
      "${root}/etc/wpa_supplicant/wpa_supplicant-wlan0.conf"
  fi
  printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' \
    > "${root}/etc/hosts"
  ln -sfn /run/systemd/resolve/stub-resolv.conf "${root}/etc/resolv.conf"

  cat > "${root}/etc/fstab" <<EOF
# outpost image ${VERSION} (${ARCH}); disk ${disk_id}: 1 boot, 2 root A, 3 root B, 4 data
# /var (PARTUUID=${disk_id}-04, ext4) is mounted by the initramfs (local-bottom/outpost-var), not
# here: a mount from fstab is bound to its device, and the first boot's online growth of the
# partition makes udev re-announce it, which would unmount /var under the running system.
PARTUUID=${disk_id}-02  /               ext4   ro,noatime,errors=remount-ro        0 1
PARTUUID=${disk_id}-01  /boot/firmware  vfat   ro,noatime,umask=0077,nofail  0 2
tmpfs                   /tmp            tmpfs  nosuid,nodev,mode=1777,size=25%      0 0
EOF

  local units=(outpost.service outpost-firstboot.service outpost-enroll.service
               outpost-boot-report.service
               outpost-health.service outpost-update.path
               systemd-networkd.service systemd-resolved.service systemd-timesyncd.service
               ssh.service)
  [ "${ARCH}" = arm64 ] && units+=(wpa_supplicant@wlan0.service)
  systemctl --root="${root}" enable "${units[@]}" >/dev/null 2>&1
  systemctl --root="${root}" disable ssh.socket >/dev/null 2>&1 || true
  # No interactive first-boot questions on a headless box; nothing here runs apt.
  systemctl --root="${root}" mask systemd-firstboot.service apt-daily.timer \
    apt-daily-upgrade.timer dpkg-db-backup.timer >/dev/null 2>&1

  # Kernel and initrd (Debian's) for the boot partition.
  local kver; kver="$(basename "$(find "${root}/lib/modules" -mindepth 1 -maxdepth 1 | sort -V | tail -n1)")"
  rm -rf "${boot}" && mkdir -p "${boot}"
  # Each root slot's kernel, initrd (and on the Pi device trees and cmdline.txt) live in
  # slot-a/ or slot-b/ on the FAT partition; an update's bundle hook writes the other one.
  # The command line template stays in the root, for that hook.
  local consoles="console=tty0 console=ttyS0,115200 console=hvc0"
  [ "${ARCH}" = arm64 ] && consoles="console=tty0 console=ttyS1,115200 cma=64M net.ifnames=0"
  mkdir -p "${root}/usr/lib/outpost/boot"
  # panic=30: an initramfs that cannot find or mount the root restarts the machine after 30 s
  # instead of waiting at a shell, so the boot selection falls back to the other slot.
  echo "root=@ROOT@ ro rootwait fsck.repair=yes panic=30 rauc.slot=@SLOT@ ${consoles}" \
    > "${root}/usr/lib/outpost/boot/cmdline.txt.in"
  local cmdline; cmdline="$(sed -e "s/@ROOT@/PARTUUID=${disk_id}-02/" -e 's/@SLOT@/A/' \
    "${root}/usr/lib/outpost/boot/cmdline.txt.in")"
  mkdir -p "${boot}/slot-a"
  cp "${root}/boot/vmlinuz-${kver}" "${boot}/slot-a/vmlinuz"
  cp "${root}/boot/initrd.img-${kver}" "${boot}/slot-a/initrd.img"
  if [ "${ARCH}" = amd64 ]; then
    # UEFI firmware → EFI/BOOT/BOOTX64.EFI (GRUB, the removable-media path every firmware
    # tries, so no boot entry in NVRAM is needed) → EFI/BOOT/grub.cfg: the A/B choice from
    # EFI/BOOT/grubenv (RAUC's grub backend writes it) → slot-X/vmlinuz with slot-X/cmdline.cfg.
    mkdir -p "${boot}/EFI/BOOT"
    grub_efi "${boot}/EFI/BOOT/BOOTX64.EFI"
    install -m 0644 "${here}/grub/grub.cfg" "${boot}/EFI/BOOT/grub.cfg"
    grub-editenv "${boot}/EFI/BOOT/grubenv" create
    grub-editenv "${boot}/EFI/BOOT/grubenv" set ORDER="A B" A_OK=1 A_TRY=0 B_OK=0 B_TRY=0
    echo "${cmdline}" > "${boot}/slot-a/cmdline.txt"
    printf 'set cmdline="%s"\n' "${cmdline}" > "${boot}/slot-a/cmdline.cfg"
  else
    # The Pi's boot files, the way raspi-firmware's kernel hook lays them out: its firmware
    # (bootcode.bin, start*.elf, fixup*.dat) at the top; the kernel's upstream device trees,
    # kernel, initrd and cmdline.txt under the slot's os_prefix. config.txt is the committed
    # slot; tryboot.txt (written by /usr/libexec/outpost/rauc-tryboot) the slot on trial.
    cp -a "${root}/usr/lib/raspi-firmware/." "${boot}/"
    find "${root}/usr/lib/linux-image-${kver}/broadcom" -name 'bcm27*.dtb' \
      -exec cp -t "${boot}/slot-a" {} +
    cat > "${boot}/config.txt" <<EOF
# outpost image ${VERSION} (arm64): Debian's kernel ${kver} with upstream device trees.
# os_prefix names the committed root slot's files (A/B updates: image/README.md).
# Put your own settings into usercfg.txt (read last).
arm_64bit=1
enable_uart=1
upstream_kernel=1
kernel=vmlinuz
initramfs initrd.img followkernel
disable_overscan=1
os_prefix=slot-a/
[all]
include usercfg.txt
EOF
    : > "${boot}/usercfg.txt"
    echo "${cmdline}" > "${boot}/slot-a/cmdline.txt"
  fi
  cp "${here}/boot-README.txt" "${boot}/README.txt"
  rm -rf "${root}/boot/firmware" && mkdir -p "${root}/boot/firmware"

  # /var becomes the data partition; the root keeps an empty mount point.
  rm -rf "${data}" && mv "${root}/var" "${data}" && mkdir -p "${root}/var"
  rm -rf "${root}"/tmp/* "${root}/root/.cache" "${data}"/cache/apt/* "${data}"/log/journal/*
}

# -- the disk image ----------------------------------------------------------------------------
layout() {
  local disk_id="$1" parts="${work}/parts"
  rm -rf "${parts}" && mkdir -p "${parts}"
  local used_kib; used_kib="$(du -sk "${work}/root" | cut -f1)"
  ((used_kib * 5 / 4 < ROOT_MIB * 1024)) \
    || die "the root needs $((used_kib / 1024)) MiB (+25%): raise ROOT_MIB=${ROOT_MIB}"
  log "file systems: root $((used_kib / 1024)) MiB used of ${ROOT_MIB}, data $(du -sm "${work}/data" | cut -f1) MiB"
  local epoch; epoch="$(git -C "${repo}" log -1 --format=%ct 2>/dev/null || date +%s)"
  export E2FSPROGS_FAKE_TIME="${epoch}"
  mke2fs -q -F -t ext4 -L outpost-root-a -m 0 -d "${work}/root" \
    "${parts}/root.ext4" "${ROOT_MIB}M"
  mke2fs -q -F -t ext4 -L outpost-data -m 2 -d "${work}/data" \
    -E lazy_itable_init=1,lazy_journal_init=1 "${parts}/data.ext4" "${DATA_MIB}M"
  unset E2FSPROGS_FAKE_TIME
  mkfs.vfat -C -F 32 -n OUTPOST -i "${disk_id}" "${parts}/boot.vfat" $((BOOT_MIB * 1024)) >/dev/null
  mcopy -s -p -Q -i "${parts}/boot.vfat" "${work}/boot"/* ::/

  # genimage places the file systems and writes the MBR (a partition table only: no file
  # system is made by it, so the trees stay exactly as mke2fs -d and mcopy put them).
  # Slot B is an empty partition for A/B updates; the data partition is last so that it can
  # grow to the end of the card.
  cat > "${parts}/genimage.cfg" <<EOF
image $(basename "${IMAGE}").part {
  hdimage {
    partition-table-type = "mbr"
    disk-signature = 0x${disk_id}
    align = ${ALIGN_MIB}M
    fill = true
  }
  partition boot { partition-type = 0x0c bootable = true image = "boot.vfat" offset = ${ALIGN_MIB}M }
  partition root-a { partition-type = 0x83 image = "root.ext4" }
  partition root-b { partition-type = 0x83 size = ${ROOT_MIB}M }
  partition data { partition-type = 0x83 image = "data.ext4" }
}
EOF
  mkdir -p "${parts}/empty"
  rm -f "${IMAGE}.part"
  genimage --loglevel 0 --config "${parts}/genimage.cfg" --inputpath "${parts}" \
    --rootpath "${parts}/empty" --tmppath "${parts}/tmp" --outputpath "$(dirname "${IMAGE}")"
  mv "${IMAGE}.part" "${IMAGE}"
  mkdir -p "${work}/bundle" && mv "${parts}/root.ext4" "${work}/bundle/rootfs.ext4"
  rm -rf "${parts}"
  "${here}/rauc/make-bundle.sh" "${work}/bundle" "${BUNDLE}" "${COMPATIBLE}" \
    "${VERSION}+${BUILD_ID}" "${BUILD_ID}" "outpost ${VERSION} (${ARCH})" \
    "${sign_cert}" "${sign_key}" "${keyring}"
  rm -rf "${work}/bundle"
  log "wrote ${BUNDLE} ($(du -h --apparent-size "${BUNDLE}" | cut -f1), ${COMPATIBLE} ${VERSION}+${BUILD_ID})"
}

main() {
  local started=${SECONDS}
  [ -f "${root_tar}" ] || bootstrap
  [ -f "${venv_tar}" ] || { ensure_binfmt; build_venv; }
  ensure_binfmt
  signing_keys
  local disk_id; disk_id="$(od -An -N4 -tx4 /dev/urandom | tr -d ' \n')"
  stage "${disk_id}"
  layout "${disk_id}"
  log "wrote ${IMAGE} ($(du -h --apparent-size "${IMAGE}" | cut -f1), disk ${disk_id}) in $((SECONDS - started)) s"
  echo "${BUNDLE}"
  echo "${IMAGE}"  # last: the tests read the image path from the last line
}

if [ "${1:-}" = --print-image ]; then echo "${IMAGE}"; exit 0; fi
if [ "${1:-}" = --print-bundle ]; then echo "${BUNDLE}"; exit 0; fi
if [ "${1:-}" = --stage-only ]; then
  [ -f "${root_tar}" ] || bootstrap
  [ -f "${venv_tar}" ] || { ensure_binfmt; build_venv; }
  signing_keys
  stage "$(od -An -N4 -tx4 /dev/urandom | tr -d ' \n')"; exit 0
fi
main
