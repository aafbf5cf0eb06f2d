#!/bin/sh
# Make a development signing CA and bundle signing key for RAUC bundles in DIR:
#   ca.cert.pem (the keyring devices trust), ca.key.pem, signing.cert.pem, signing.key.pem
# For development and tests only: the keys sit unencrypted on the build machine. Production
# bundles are signed with RAUC_CERT/RAUC_KEY (a file or a PKCS#11 URL, image/README.md).
#   dev-keys.sh DIR [ORGANISATION]
set -eu
dir="$1"
org="${2:-outpost development (not for production)}"
mkdir -p "${dir}" && chmod 0700 "${dir}"
umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
  -subj "/O=${org}/CN=outpost bundle CA" -keyout "${dir}/ca.key.pem" -out "${dir}/ca.cert.pem" \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
  2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -subj "/O=${org}/CN=outpost bundle signing" -keyout "${dir}/signing.key.pem" \
  -out "${dir}/signing.csr" 2>/dev/null
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n' \
  > "${dir}/signing.ext"
openssl x509 -req -in "${dir}/signing.csr" -CA "${dir}/ca.cert.pem" -CAkey "${dir}/ca.key.pem" \
  -CAcreateserial -days 3650 -extfile "${dir}/signing.ext" -out "${dir}/signing.cert.pem" \
  2>/dev/null
chmod 0644 "${dir}/ca.cert.pem" "${dir}/signing.cert.pem"
rm -f "${dir}/signing.csr" "${dir}/signing.ext" "${dir}/ca.cert.srl"
