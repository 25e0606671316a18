# The README's two commands:
#   make run   install what is missing, build Release, start dmkv-memnode + dmkv-gateway
#              on 127.0.0.1:6379 in the foreground (Ctrl-C stops both)
#   make test  install what is missing, build with ASan+UBSan, run ctest
.PHONY: run test deps build build-test bench clean format

JOBS ?= $(shell nproc)
PORT ?= 6379
MEMNODE_PORT ?= 7000
MEMNODE_SIZE ?= 1g

deps:
	@scripts/install-deps.sh

build: deps
	cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build -j$(JOBS)

run: build
	@PORT=$(PORT) MEMNODE_PORT=$(MEMNODE_PORT) MEMNODE_SIZE=$(MEMNODE_SIZE) scripts/run.sh build

build-test: deps
	cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Debug -DDMKV_SANITIZE=ON >/dev/null
	cmake --build build-test -j$(JOBS)

test: build-test
	cd build-test && ctest --output-on-failure -j2 --timeout 900

bench: build
	@if [ -n "$(BEFORE)" ]; then bench/before-after.sh build "$(BEFORE)"; \
	else bench/redis-vs-dmkv.sh build; fi

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-test
