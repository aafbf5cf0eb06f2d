# outpost — the two set-up commands are `make demo` and `make test`.
# Everything a test needs is installed here: a virtual environment with the project and its
# dev extras, and (when run as root) the Debian packages the tests drive as real peers.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEBIAN_PACKAGES := mosquitto mosquitto-clients socat openssl
# stress-ng: `make test-loaded` (the suite next to a CPU hog).
DEBIAN_PACKAGES += stress-ng
# valgrind: `python -m bench.instructions` counts the broker's instructions with callgrind.
DEBIAN_PACKAGES += valgrind
# systemd: systemd-analyze for the unit checks; libsystemd-dev + pkg-config: to build
# systemd-python (the [systemd] extra); chromium: the status page test (headless).
DEBIAN_PACKAGES += systemd libsystemd-dev pkg-config chromium
# chromium-driver: the web console's browser tests drive chromium through selenium.
DEBIAN_PACKAGES += chromium-driver
# rauc: tests/outpost/test_remote_update.py checks a real bundle with `rauc info`.
DEBIAN_PACKAGES += rauc
STAMP := $(VENV)/.installed-stamp
INSTALL_LOG := $(VENV)/install.log
# npm projects that tests drive as real third-party peers, one folder each with its
# package.json and package-lock.json; `make node-packages` runs `npm ci` in each (from the
# registry, never a download of its own). Each feature adds its folder with a line of its own.
NPM_DIRS :=
# MQTT.js (Node-RED's client) bursting publishes at the broker: tests/gateway/broker/e2e/test_26_mqttjs.py
NPM_DIRS += tests/gateway/broker/e2e/mqttjs
# node-opcua: the third-party OPC UA server of the bridge's OPC UA tests (tests/bridge/opcua/).
NPM_DIRS += tests/bridge/opcua/node_server
# node-snap7 (snap7's C S7 server, built with node-gyp): the S7 bridge tests' PLC (tests/bridge/s7/).
NPM_DIRS += tests/bridge/s7/node_server
# @bacnet-js/client (a TypeScript BACnet stack): the BACnet bridge tests' devices (tests/bridge/bacnet/).
NPM_DIRS += tests/bridge/bacnet/node_device
# Aedes (Node.js, Mosca's successor): a peer broker of bench.compare --brokers (bench/peers/aedes/).
NPM_DIRS += bench/peers/aedes
# uPlot: the web console's charts. Not a test peer: `make console-vendor` copies its built files
# into outpost/console/static/vendor/ (committed; tests/outpost/console/test_console_charts.py
# checks they are the pinned package's, byte for byte).
NPM_DIRS += outpost/console/vendor

.PHONY: demo test test-loaded lint typecheck unit soak fleet-test pipeline-test bench system-packages node-packages java-packages clean

# system-packages first (order only): systemd-python in the dev extras builds against libsystemd.
$(STAMP): pyproject.toml | system-packages
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq python3-venv && $(PYTHON) -m venv $(VENV); \
	  else echo "python3 -m venv failed: install python3-venv" >&2; exit 1; fi; }
	@# pip and setuptools talk a lot (editable-install warnings): their output goes to
	@# $(INSTALL_LOG) and is shown only when a step fails.
	@echo "installing the project into $(VENV) (log: $(INSTALL_LOG))"
	@$(PY) -m pip install -q --upgrade pip > $(INSTALL_LOG) 2>&1 \
	  && $(PY) -m pip install -q -e '.[dev]' >> $(INSTALL_LOG) 2>&1 \
	  || { cat $(INSTALL_LOG) >&2; echo "pip install failed (above)" >&2; exit 1; }
	@# systemd-python builds against libsystemd (installed by system-packages when root); the
	@# daemon falls back to its own sd_notify/journald senders without it.
	@$(PY) -m pip install -q -e '.[systemd]' >> $(INSTALL_LOG) 2>&1 || echo "note: systemd-python" \
	  "not installed (needs libsystemd-dev and pkg-config); the daemon uses its built-in senders" >&2
	@touch $@

system-packages:
	@missing=""; for p in $(DEBIAN_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v java >/dev/null 2>&1 || missing="$$missing default-jre-headless"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing nodejs npm"; \
	command -v go >/dev/null 2>&1 || missing="$$missing golang-go"; \
	command -v mvn >/dev/null 2>&1 || missing="$$missing maven"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else echo "not root: tests needing$$missing will be skipped (sudo make system-packages)" >&2; fi

node-packages: system-packages
	@for dir in $(NPM_DIRS); do \
	  if [ ! -f "$$dir/node_modules/.package-lock.json" ] || \
	     [ "$$dir/package-lock.json" -nt "$$dir/node_modules/.package-lock.json" ]; then \
	    echo "npm ci in $$dir"; (cd "$$dir" && npm ci --no-audit --no-fund --loglevel=error) || exit 1; \
	  fi; done

# The Go modules: the Paho Go clients of tests/gateway/broker/e2e/test_28_go_clients.py and the
# Go load generator of bench/ (bench/goload, `bench.compare --generator go`). Their modules into
# Go's module cache, and one build each to warm Go's build cache (the tests build again, in
# seconds). Their go.mod needs Go 1.24: an older `go` (bookworm's golang-go is 1.19) is told and
# the tests skip.
GO_DIRS := tests/gateway/broker/e2e/goclients bench/goload
.PHONY: go-packages
go-packages: system-packages
	@if printf 'go1.24\n%s\n' "$$(go env GOVERSION 2>/dev/null)" | sort -V -C; then \
	  for dir in $(GO_DIRS); do \
	    (cd $$dir && go mod download && go build -buildvcs=false -o /dev/null .) || exit 1; \
	  done; \
	else echo "note: no go >= 1.24: the Go client and Go load generator tests will be skipped" >&2; fi

# The Java cloud brokers of tests/test_cloud_brokers.py (moquette, HiveMQ CE embedded): each
# folder's pom.xml names one broker; Maven copies it and its dependencies into that folder's
# lib/ (gitignored), again only when the pom changed.
MAVEN_DIRS := $(wildcard tests/support/cloud_brokers/*)
.PHONY: java-packages
java-packages: system-packages
	@for dir in $(MAVEN_DIRS); do \
	  if [ ! -d "$$dir/lib" ] || [ "$$dir/pom.xml" -nt "$$dir/lib" ]; then \
	    echo "maven: the jars of $$dir"; rm -rf "$$dir/lib"; \
	    mvn -q -B -f "$$dir/pom.xml" dependency:copy-dependencies \
	      -DoutputDirectory=lib -DincludeScope=runtime || exit 1; touch "$$dir/lib"; \
	  fi; done

# The console's vendored chart library (uPlot, MIT): its pinned npm package's built files into
# the package's static folder; run after changing its version in outpost/console/vendor/, then
# commit the copies (a gateway installs them with the package, never from npm or a CDN).
CONSOLE_VENDOR := outpost/console/static/vendor
.PHONY: console-vendor
console-vendor: node-packages
	@mkdir -p $(CONSOLE_VENDOR)
	cp outpost/console/vendor/node_modules/uplot/dist/uPlot.iife.min.js \
	   outpost/console/vendor/node_modules/uplot/dist/uPlot.min.css $(CONSOLE_VENDOR)/
	cp outpost/console/vendor/node_modules/uplot/LICENSE $(CONSOLE_VENDOR)/uPlot.LICENSE

# The Spark jobs' JVM packages (Delta; cloud_spark/spark.py, SPARK_PACKAGES) from Maven
# Central into their Ivy cache, once, before the tests start sessions in parallel.
.PHONY: spark-packages
spark-packages: $(STAMP) system-packages
	$(PY) -c "from cloud_spark.spark import fetch_packages; fetch_packages()"

# The S3 connector of the jobs on s3:// paths (hadoop-aws and its ~650 MiB AWS SDK bundle;
# cloud_spark/object_store_conf.py) into the same cache, for the S3 tests of pipeline-test.
.PHONY: s3a-packages
s3a-packages: spark-packages
	$(PY) -c "from cloud_spark.object_store_conf import fetch_s3a_packages; fetch_s3a_packages()"

demo: $(STAMP)
	$(VENV)/bin/outpost demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# Two workers, handed tests one at a time (worksteal): most tests wait on sockets and child
# processes, so two of them overlap well even on two cores. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal

test: $(STAMP) system-packages node-packages go-packages java-packages spark-packages lint typecheck
	$(PYTEST)

# The suite with a CPU hog on every core (stress-ng), RUNS times in a row: a test that waits for
# time instead of for its event fails here first. Stops at the first failing run.
RUNS ?= 1
test-loaded: $(STAMP) system-packages node-packages lint typecheck
	@for run in $$(seq $(RUNS)); do \
	  stress-ng --cpu 0 --cpu-load 100 --quiet & hog=$$!; \
	  $(PYTEST); status=$$?; \
	  kill $$hog; wait $$hog 2>/dev/null; \
	  if [ $$status != 0 ]; then echo "run $$run of $(RUNS) failed under load" >&2; exit $$status; fi; \
	  echo "run $$run of $(RUNS) passed under load"; \
	done

soak: $(STAMP) system-packages
	$(PY) -m pytest -q -m soak

# Twenty gateways enroll against a TLS mosquitto, take a remote configuration, one rolls back;
# the fleet table from the Spark jobs (tests/outpost/test_fleet.py; several minutes).
fleet-test: $(STAMP) system-packages
	$(PY) -m pytest -q -s -m fleet tests/outpost/test_fleet.py

# Scenarios of minutes each, through to Spark (marker `pipeline`): the same outbox rows sent one
# by one and batched build the same silver tables (tests/cloud_spark/test_batched_silver.py),
# `make demo` lands everything, incremental runs equal full ones, spark-submit on a standalone
# cluster. About 5 minutes on two workers (quiet machine).
pipeline-test: $(STAMP) system-packages spark-packages s3a-packages
	$(PYTEST) -m pipeline tests

bench: $(STAMP) system-packages
	$(PY) -m bench.compare

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# -- flashable image: image/README.md ---------------------------------------------------------
# `make image` (arm64, Raspberry Pi) or `make image ARCH=amd64` writes outpost-<version>-<arch>.img
# and the signed RAUC update bundle outpost-<version>-<arch>.raucb;
# `make image-test` builds the amd64 image and boots it (systemd-nspawn, then QEMU).
ARCH ?= arm64
# rauc + squashfs-tools + openssl: the signed update bundle next to each image (and its tests);
# grub-efi-amd64-bin + grub-common: the amd64 image's GRUB (EFI); ovmf: UEFI firmware for QEMU.
IMAGE_PACKAGES := mmdebstrap qemu-user-static binfmt-support arch-test systemd-container \
	dosfstools mtools fdisk genimage e2fsprogs grub-efi-amd64-bin grub-common ovmf qemu-system-x86 qemu-system-arm \
	rauc squashfs-tools openssl socat
.PHONY: image image-test image-packages

image-packages:
	@missing=""; for p in $(IMAGE_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
	  echo "installing Debian packages for the image:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else echo "make image needs root and:$$missing (sudo make image-packages)" >&2; exit 1; fi

image: image-packages
	ARCH=$(ARCH) bash image/build.sh

# Three workers, each handed whole files: the two QEMU machines (tests/image/test_qemu*.py, each
# a chain of boots run in order, a core each) side by side, the container and bundle tests on
# the third; the image is built once (tests/image/conftest.py).
image-test: $(STAMP) system-packages image-packages
	$(PY) -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder --durations=0 -m image tests/image
