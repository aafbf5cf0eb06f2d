#!/bin/sh
# Sign a RAUC bundle (verity format) of a root file system image:
#   make-bundle.sh DIR BUNDLE COMPATIBLE VERSION BUILD DESCRIPTION CERT KEY KEYRING
# DIR holds rootfs.ext4; the manifest and the hook (bundle-hook.sh, run after the slot is
# written) are added here. CERT and KEY are PEM files or PKCS#11 URLs (rauc bundle --cert/--key).
# zstd at level 6: mksquashfs's default level (15) took minutes for one root on a loaded
# two-core build machine for a few percent less size.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
dir="$1" bundle="$2" compatible="$3" version="$4" build="$5" description="$6"
cert="$7" key="$8" keyring="$9"
[ -f "${dir}/rootfs.ext4" ] || { echo "make-bundle.sh: no ${dir}/rootfs.ext4" >&2; exit 1; }
install -m 0755 "${here}/bundle-hook.sh" "${dir}/hook.sh"
cat > "${dir}/manifest.raucm" <<EOF
[update]
compatible=${compatible}
version=${version}
build=${build}
description=${description}

[bundle]
format=verity

[hooks]
filename=hook.sh

[image.rootfs]
filename=rootfs.ext4
hooks=post-install
EOF
rm -f "${bundle}.part"
rauc bundle --cert="${cert}" --key="${key}" --keyring="${keyring}" \
  --mksquashfs-args="-comp zstd -Xcompression-level 6" "${dir}" "${bundle}.part" >/dev/null
mv "${bundle}.part" "${bundle}"
