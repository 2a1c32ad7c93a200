# The two commands of the README:
#   make run    builds (Release) and runs the main example: CPU by default, the GPU when present
#   make test   builds and runs every test through ctest (GPU tests skip without a GPU)
# Both first install missing system packages (scripts/install-deps.sh).
# Knobs: BUILD_DIR=build  JOBS=<cores>  CMAKE_FLAGS="-DTG_CUDA=OFF"  ARGS="--steps 100"

BUILD_DIR ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
ARGS ?=

.PHONY: run test build configure deps bench clean

run: build
	./$(BUILD_DIR)/examples/toy_transformer $(ARGS)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS)

build: configure
	cmake --build $(BUILD_DIR) -j$(JOBS)

configure: deps
	@if [ ! -f $(BUILD_DIR)/CMakeCache.txt ]; then \
	  gen=$$(command -v ninja >/dev/null 2>&1 && echo "-G Ninja"); \
	  cmake -S . -B $(BUILD_DIR) $$gen -DCMAKE_BUILD_TYPE=Release -DTG_WERROR=ON $(CMAKE_FLAGS); \
	elif [ -n "$(CMAKE_FLAGS)" ]; then \
	  cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS); \
	fi

deps:
	@./scripts/install-deps.sh

clean:
	rm -rf $(BUILD_DIR)
