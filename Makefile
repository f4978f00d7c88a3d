# Makefile — builds ringtrain, its tools and tests; installs what is missing (make deps).
#
# Every setting is a ?= variable; override on the command line: make CUDA=0 DEBUG=1.

# Dependencies from cluster modules instead of apt: each names an install prefix whose include/
# and lib64/ or lib/ are used and written into the binaries' RUNPATH (the names modules set).
MPI_HOME   ?=
HDF5_ROOT  ?=
DNNL_ROOT  ?=
BOOST_ROOT ?=
CUDNN_ROOT ?= $(CUDNN_HOME)
NCCL_ROOT  ?= $(NCCL_HOME)

MPICXX    ?= $(if $(MPI_HOME),$(MPI_HOME)/bin/mpicxx,mpicxx)
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CUDA      ?= auto
CUDA_HOME ?= /usr/local/cuda
# sm_90 (H100, H200: the GPUs this project runs on) as real code, plus its PTX, which newer GPUs
# JIT; one architecture halves nvcc's share of a build. An A100 cluster: make CUDA_ARCHS="80 90".
CUDA_ARCHS ?= 90
DEBUG     ?= 0
# SANITIZE=1: AddressSanitizer and UndefinedBehaviorSanitizer in every object and program, any
# undefined behaviour fatal (make sanitize builds so under build/sanitize and runs the tests).
# SANITIZE=thread: ThreadSanitizer (make sanitize-thread: the MPI tests, under build/tsan).
SANITIZE  ?= 0
VERBOSE   ?= 0
PYTHON    ?= /usr/bin/python3
# BUNDLE_BUILD=1 (make bundle): a CPU baseline any x86-64 GPU host runs (oneDNN picks its own
# kernels at run time), and RPATHs relative to the binary.
BUNDLE_BUILD ?= 0
ARCH_FLAGS ?= $(if $(filter 1,$(BUNDLE_BUILD)),-march=x86-64-v3,-march=native)
NP        ?= 2
BUILD     ?= build
BIN       ?= bin
BUNDLE    ?= dist/ringtrain

COMMA := ,
# Every core unless -j is given (make -j1 for a serial build): a build from a clean clone is
# mostly compiling, and one compiler at a time left half of a 2-core machine idle.
# Only the top make: the makes it starts share its job slots.
ifeq ($(MAKELEVEL)$(filter -j%,$(MAKEFLAGS)),0)
  MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif
ifeq ($(filter $(CUDA),auto 0 1),)
  $(error CUDA=$(CUDA): use CUDA=auto, CUDA=0 or CUDA=1)
endif
ifeq ($(filter $(DEBUG),0 1),)
  $(error DEBUG=$(DEBUG): use DEBUG=0 or DEBUG=1)
endif
ifeq ($(filter $(SANITIZE),0 1 thread),)
  $(error SANITIZE=$(SANITIZE): use SANITIZE=0, SANITIZE=1 or SANITIZE=thread)
endif
ifeq ($(VERBOSE),1)
  Q :=
else
  Q := @
endif

# A prefix's library folder, and the flags that link from it and find it again at run time.
libdir_of = $(firstword $(wildcard $(1)/lib64 $(1)/lib) $(1)/lib)
link_from = -L$(call libdir_of,$(1)) -Wl,-rpath,$(call libdir_of,$(1))
# -lNAME where DIR has libNAME.so, else the versioned file (pip wheels ship only libcudnn.so.9).
link_lib = $(if $(wildcard $(1)/lib$(2).so),-l$(2),-l:lib$(2).so.$(3))

# CUDA=auto builds the CUDA backend when nvcc and cudnn.h are both found.
CUDNN_H := $(firstword $(wildcard $(if $(CUDNN_ROOT),$(CUDNN_ROOT)/include/cudnn.h) \
                                   $(CUDA_HOME)/include/cudnn.h /usr/include/cudnn.h \
                                   /usr/include/x86_64-linux-gnu/cudnn.h))
ifeq ($(CUDA),auto)
  ifneq ($(and $(wildcard $(NVCC)),$(CUDNN_H)),)
    HAVE_CUDA := 1
  else
    HAVE_CUDA := 0
  endif
else
  HAVE_CUDA := $(CUDA)
endif
ifeq ($(HAVE_CUDA),1)
  ifeq ($(wildcard $(NVCC)),)
    $(error CUDA=1 but nvcc is not at $(NVCC): set CUDA_HOME or NVCC)
  endif
endif

ifneq ($(HDF5_ROOT),)
  HDF5_CFLAGS ?= -I$(HDF5_ROOT)/include
  HDF5_LIBS   ?= $(call link_from,$(HDF5_ROOT)) -lhdf5
endif
HDF5_CFLAGS ?= $(shell pkg-config --cflags hdf5-serial 2>/dev/null || echo -I/usr/include/hdf5/serial)
HDF5_LIBS   ?= $(shell pkg-config --libs hdf5-serial 2>/dev/null || echo -lhdf5_serial)
ROOT_CFLAGS := $(foreach r,$(DNNL_ROOT) $(BOOST_ROOT),-I$(r)/include)
ROOT_LIBS   := $(foreach r,$(DNNL_ROOT) $(BOOST_ROOT),$(call link_from,$(r)))
# The bundle's binaries find its lib/ from bin/ and bin/tests/; DT_RPATH (not RUNPATH) so the
# libraries they load find theirs there too.
BUNDLE_RPATH := $(if $(filter 1,$(BUNDLE_BUILD)),-Wl$(COMMA)--disable-new-dtags$(COMMA)-rpath$(COMMA)'$$ORIGIN/../lib:$$ORIGIN/../../lib')

OPT_FLAGS := $(if $(filter 1,$(DEBUG)),-O0 -g -fno-omit-frame-pointer,-O3 -g1 -DNDEBUG $(ARCH_FLAGS))
SAN_FLAGS := $(if $(filter 1,$(SANITIZE)),-fsanitize=address$(COMMA)undefined \
               -fno-sanitize-recover=undefined -fno-omit-frame-pointer) \
             $(if $(filter thread,$(SANITIZE)),-fsanitize=thread -fno-omit-frame-pointer)
CXXFLAGS  ?=
CXXFLAGS  += -std=c++17 -Wall -Wextra -fopenmp -pthread $(OPT_FLAGS) $(SAN_FLAGS) -MMD -MP -DOMPI_SKIP_MPICXX \
             -Iinclude -I$(BUILD)/include $(HDF5_CFLAGS) $(ROOT_CFLAGS)
LDLIBS    += $(SAN_FLAGS) $(BUNDLE_RPATH) $(HDF5_LIBS) $(ROOT_LIBS) -ldnnl -lboost_program_options -lz -lpng -ljpeg -ltiff \
             -fopenmp -pthread

ifeq ($(HAVE_CUDA),1)
  CUDA_LIBDIR  := $(call libdir_of,$(CUDA_HOME))
  CUDNN_LIBDIR := $(if $(CUDNN_ROOT),$(call libdir_of,$(CUDNN_ROOT)),$(CUDA_LIBDIR))
  NCCL_LIBDIR  := $(if $(NCCL_ROOT),$(call libdir_of,$(NCCL_ROOT)),$(CUDA_LIBDIR))
  CUDA_CFLAGS  := $(foreach r,$(CUDNN_ROOT) $(NCCL_ROOT),-I$(r)/include) -I$(CUDA_HOME)/include
  CXXFLAGS  += $(CUDA_CFLAGS)
  # The bundle finds CUDA's libraries on the target (its env.sh): no build path in its RPATH.
  LDLIBS    += $(foreach d,$(sort $(CUDA_LIBDIR) $(CUDNN_LIBDIR) $(NCCL_LIBDIR)),-L$(d) \
                 $(if $(filter 1,$(BUNDLE_BUILD)),,-Wl,-rpath,$(d))) \
               $(call link_lib,$(CUDNN_LIBDIR),cudnn,9) $(call link_lib,$(NCCL_LIBDIR),nccl,2) \
               -lcublas -lcudart
  # Real code for each listed architecture plus PTX of the last, which newer GPUs JIT.
  NVCC_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
                  -gencode arch=compute_$(lastword $(CUDA_ARCHS)),code=compute_$(lastword $(CUDA_ARCHS))
  NVCCFLAGS ?= -std=c++17 $(if $(filter 1,$(DEBUG)),-O0 -g -G,-O3 -lineinfo) -Iinclude \
               -I$(BUILD)/include $(CUDA_CFLAGS) -ccbin $(MPICXX) \
               -Xcompiler -Wall,-Wextra $(NVCC_GENCODE) -MMD -MP
endif

# ---- sources -------------------------------------------------------------------------
# The tools' library, by folder: what only the tools and tests use (the fiber generator, the
# dataset converters and shard writer, the benchmarks' library) and the link probe (comm/:
# MPI); bin/ringtrain does not carry it.
TOOLS_LIB_CPP := $(sort $(wildcard src/fiber/*.cpp src/data/shard/*.cpp tools/bench/*.cpp) \
                   src/comm/link_probe.cpp)
LIB_CPP   := $(filter-out $(TOOLS_LIB_CPP),$(shell find src -name '*.cpp' ! -path 'src/backend/cuda/*' ! -name main.cpp | sort))
ifeq ($(HAVE_CUDA),1)
  LIB_CPP += $(sort $(wildcard src/backend/cuda/*.cpp))
  LIB_CU  := $(sort $(wildcard src/backend/cuda/*.cu))
endif
LIB_OBJ   := $(LIB_CPP:%.cpp=$(BUILD)/%.o) $(LIB_CU:%.cu=$(BUILD)/%.cu.o)
LIB       := $(BUILD)/libringtrain.a
TOOLS_LIB_OBJ := $(TOOLS_LIB_CPP:%.cpp=$(BUILD)/%.o)
TOOLS_LIB := $(BUILD)/libringtrain_tools.a

# rt-export alone links ONNX's library, protobuf and libzip (ONNX_ROOT, or Debian's libonnx-dev); built
# where their headers are found.
ONNX_ROOT ?=
ONNX_H    := $(firstword $(wildcard $(if $(ONNX_ROOT),$(ONNX_ROOT)/include/onnx/onnx_pb.h) \
                                     /usr/include/onnx/onnx_pb.h))
ONNX_LIBS ?= $(if $(ONNX_ROOT),$(call link_from,$(ONNX_ROOT))) -lonnx -lonnx_proto -lprotobuf -lzip
TOOL_SRC  := $(sort $(filter-out $(if $(ONNX_H),,tools/rt-export.cpp),$(wildcard tools/rt-*.cpp)))
TOOLS     := $(TOOL_SRC:tools/%.cpp=$(BIN)/%)
EXPORT_CPP := $(sort $(wildcard tools/export/*.cpp))
EXPORT_OBJ := $(EXPORT_CPP:%.cpp=$(BUILD)/%.o)
UNIT_SRC  := $(sort $(wildcard tests/unit/*.cpp))
UNIT_BIN  := $(BIN)/tests/unit
MPI_SRC   := $(sort $(wildcard tests/mpi/*.cpp))
MPI_BINS  := $(MPI_SRC:tests/mpi/%.cpp=$(BIN)/tests/mpi_%)
CONFIG_H  := $(BUILD)/include/ringtrain/build_config.hpp
INFO_H    := $(BUILD)/include/ringtrain/build_info.hpp
GIT_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)

# Objects of tools and tests are intermediate to make; keep them, so a relink recompiles nothing.
.SECONDARY:

.PHONY: all deps bench-deps bundle test check sanitize sanitize-thread run bench bench-compute bench-allreduce bench-scaling clean found format docs FORCE
.DEFAULT_GOAL := all

all: $(BIN)/ringtrain $(TOOLS)
tests: $(UNIT_BIN) $(MPI_BINS)

found:
	@PYTHON=$(PYTHON) HAVE_CUDA=$(HAVE_CUDA) CUDA_HOME=$(CUDA_HOME) tools/deps.sh --report

deps:
	@PYTHON=$(PYTHON) HAVE_CUDA=$(HAVE_CUDA) CUDA_HOME=$(CUDA_HOME) tools/deps.sh --install

# The benchmarks' peers too (PyTorch and its BLAS).
bench-deps:
	@PYTHON=$(PYTHON) HAVE_CUDA=$(HAVE_CUDA) CUDA_HOME=$(CUDA_HOME) tools/deps.sh --install --bench

# The generated header changes only when a setting does, so it never forces a rebuild.
$(CONFIG_H): FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' '// build_config.hpp — generated by the Makefile; do not edit.' '#pragma once' \
	  '#define RINGTRAIN_HAS_CUDA $(HAVE_CUDA)' '#define RINGTRAIN_VERSION "0.1.0"' \
	  '#define RINGTRAIN_DEBUG $(DEBUG)' > $@.new
	@cmp -s $@.new $@ && rm -f $@.new || mv $@.new $@
# The commit goes in its own header, included only by the results writer.
$(INFO_H): FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' '// build_info.hpp — generated by the Makefile; do not edit.' '#pragma once' \
	  '#define RINGTRAIN_GIT_COMMIT "$(GIT_COMMIT)"' > $@.new
	@cmp -s $@.new $@ && rm -f $@.new || mv $@.new $@
$(BUILD)/src/io/results.o: $(INFO_H)
FORCE:

# The test programs' own code at -Og (GCC's optimizations that keep a failing test debuggable):
# it compiles in far less time than -O3 (docs/TESTING.md, Timings), and nothing in it is timed;
# the library they test stays -O3.
$(BUILD)/tests/%.o: OPT_FLAGS := $(if $(filter 1,$(DEBUG)),$(OPT_FLAGS),-Og -g1 -DNDEBUG $(ARCH_FLAGS))

# The cpu backend's own loops over channel runs compute each lane alike at every pack width (16
# lanes with AVX-512, 8 in the bundle's x86-64-v3 build), so the two builds agree bitwise: no
# fused multiply-adds formed from a * b + c, which GCC formed at one width and not the other.
$(addprefix $(BUILD)/src/backend/cpu/,norm_relu_pool.o norm_pool.o batch_statistics.o norm_passes.o): \
  CXXFLAGS += -ffp-contract=off

$(BUILD)/%.o: %.cpp $(CONFIG_H)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CXX   $<")
	$(Q)$(MPICXX) $(CXXFLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu $(CONFIG_H)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC  $<")
	$(Q)$(NVCC) $(NVCCFLAGS) -c $< -o $@

# Every library and program is written to $@.part and renamed over the old one: a program started
# while make relinks it (a test run beside a build) runs the old file or the new, never a
# half-written one, which mpirun could not execute (exit 132, seen in e2e/loss_scale).
$(LIB): $(LIB_OBJ)
	@$(if $(Q),echo "  AR    $@")
	$(Q)rm -f $@.part && ar rcs $@.part $^ && mv -f $@.part $@

$(TOOLS_LIB): $(TOOLS_LIB_OBJ)
	@$(if $(Q),echo "  AR    $@")
	$(Q)rm -f $@.part && ar rcs $@.part $^ && mv -f $@.part $@

$(BIN)/ringtrain: $(BUILD)/src/main.o $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK  $@")
	$(Q)$(MPICXX) $^ -o $@.part $(LDLIBS) && mv -f $@.part $@

# The tools' library first: its objects call into the trainer's library.
$(BIN)/rt-%: $(BUILD)/tools/rt-%.o $(TOOLS_LIB) $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK  $@")
	$(Q)$(MPICXX) $^ -o $@.part $(LDLIBS) && mv -f $@.part $@

$(EXPORT_OBJ) $(BUILD)/tools/rt-export.o: CXXFLAGS += -DONNX_NAMESPACE=onnx -DONNX_ML=1 \
  $(if $(ONNX_ROOT),-I$(ONNX_ROOT)/include)
$(BIN)/rt-export: $(BUILD)/tools/rt-export.o $(EXPORT_OBJ) $(TOOLS_LIB) $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK  $@")
	$(Q)$(MPICXX) $^ -o $@.part $(LDLIBS) $(ONNX_LIBS) && mv -f $@.part $@

$(UNIT_BIN): $(UNIT_SRC:%.cpp=$(BUILD)/%.o) $(TOOLS_LIB) $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK  $@")
	$(Q)$(MPICXX) $^ -o $@.part $(LDLIBS) -lboost_unit_test_framework && mv -f $@.part $@

$(BIN)/tests/mpi_%: $(BUILD)/tests/mpi/%.o $(TOOLS_LIB) $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK  $@")
	$(Q)$(MPICXX) $^ -o $@.part $(LDLIBS) -lboost_unit_test_framework && mv -f $@.part $@

# ---- the bundle: a folder (and tarball) that runs where none of the packages are ------------
# Its own build (a portable -march, RPATHs relative to the binaries) beside the normal one.
# It is for GPU machines: a build where nvcc or cudnn.h is missing stops here instead of making a
# CPU-only bundle without a word (CUDA=0 asks for one).
ifneq ($(filter bundle,$(MAKECMDGOALS)),)
  ifeq ($(if $(filter 0,$(CUDA)),,$(if $(and $(filter 1,$(HAVE_CUDA)),$(CUDNN_H)),,1)),1)
    $(error make bundle: the CUDA backend would not be built (nvcc $(if $(wildcard $(NVCC)),at \
      $(NVCC),not at $(NVCC)), cudnn.h $(if $(CUDNN_H),at $(CUDNN_H),not under CUDNN_ROOT or \
      CUDA_HOME=$(CUDA_HOME))): set CUDA_HOME or CUDNN_ROOT, or make bundle CUDA=0 for a bundle \
      without the GPU backend)
  endif
endif
bundle: deps
	@$(MAKE) --no-print-directory BUNDLE_BUILD=1 BUILD=$(BUILD)/bundle BIN=$(BUILD)/bundle/bin \
	  all tests
	@tools/bundle.sh $(BUILD)/bundle/bin $(BUNDLE)

# ---- the README's commands -----------------------------------------------------------
test: deps
	@$(MAKE) --no-print-directory found
	@$(MAKE) --no-print-directory all tests
	@PYTHON=$(PYTHON) BIN=$(BIN) tests/run.sh

# The unit tests and every MPI test on this machine under AddressSanitizer and UBSan, from a build
# of their own beside the normal one, tools included (a unit case runs rt-shard); docs/TESTING.md,
# "Sanitizers". Leaks are checked in the unit tests, not under mpirun, where OpenMPI's own
# allocations still held at exit would drown them.
SANITIZE_BUILD := $(BUILD)/sanitize
sanitize: deps
	@$(MAKE) --no-print-directory SANITIZE=1 BUILD=$(SANITIZE_BUILD) BIN=$(SANITIZE_BUILD)/bin all tests
	@ASAN_OPTIONS=detect_leaks=1 PYTHON=$(PYTHON) BIN=$(SANITIZE_BUILD)/bin \
	  LOG_DIR=output/test-logs/sanitize tests/run.sh unit
	@ASAN_OPTIONS=detect_leaks=0 PYTHON=$(PYTHON) BIN=$(SANITIZE_BUILD)/bin \
	  LOG_DIR=output/test-logs/sanitize tests/run.sh np=

# Every MPI test at every rank count under ThreadSanitizer: the threads of our own beside each
# rank's main thread (the fusion engine's comm thread, the loader's, the stall watchdog, the
# shared-memory waits), from a CPU-only build of their own; docs/TESTING.md, "Sanitizers".
# One OpenMP thread a rank (libgomp is not instrumented: its barriers would read as races) and
# OpenMPI's own locks and requests suppressed (tests/tsan.supp: not instrumented either); the
# 64 Mi-float test is left out (minutes under TSan, and no thread of ours that the 4 Ki-float
# ones do not run).
TSAN_BUILD := $(BUILD)/tsan
sanitize-thread: deps
	@$(MAKE) --no-print-directory SANITIZE=thread CUDA=0 BUILD=$(TSAN_BUILD) BIN=$(TSAN_BUILD)/bin \
	  $(MPI_SRC:tests/mpi/%.cpp=$(TSAN_BUILD)/bin/tests/mpi_%)
	@OMP_NUM_THREADS=1 OMPI_MCA_btl=self,vader \
	  TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp second_deadlock_stack=1" \
	  PYTHON=$(PYTHON) BIN=$(TSAN_BUILD)/bin LOG_DIR=output/test-logs/sanitize-thread \
	  tests/run.sh --exclude mpi_test_ring_allreduce_large np=

# The inner loop (docs/TESTING.md): the unit tests and each MPI test at its "// quick:" rank
# counts, in under a minute on 2 cores; it builds only the test binaries and names what it left out.
check:
	@$(MAKE) --no-print-directory tests
	@PYTHON=$(PYTHON) BIN=$(BIN) tests/run.sh --quick

run: deps
	@$(MAKE) --no-print-directory found all
	@PYTHON=$(PYTHON) BIN=$(BIN) jobs/local/quickstart.sh

bench: bench-allreduce bench-compute bench-scaling

bench-allreduce: bench-deps
	@$(MAKE) --no-print-directory all
	@BIN=$(BIN) tools/bench-allreduce.sh

bench-compute: bench-deps
	@$(MAKE) --no-print-directory all
	@PYTHON=$(PYTHON) BIN=$(BIN) tools/bench-compute.sh

bench-scaling: bench-deps
	@$(MAKE) --no-print-directory all
	@PYTHON=$(PYTHON) BIN=$(BIN) tools/bench-scaling.sh

# docs/DECK.md is generated from the option table (src/config/config.cpp) that --help prints;
# tests/e2e/deck_reference.sh fails when the committed file differs from it.
docs: $(BIN)/ringtrain
	$(BIN)/ringtrain --help-markdown >docs/DECK.md

format:
	clang-format -i $$(find include src tools tests -name '*.hpp' -o -name '*.cpp' -o -name '*.cu')

clean:
	rm -rf $(BUILD) $(BIN) $(BUNDLE) $(BUNDLE).tar.xz

-include $(LIB_OBJ:.o=.d) $(TOOLS_LIB_OBJ:.o=.d) $(EXPORT_OBJ:.o=.d) $(BUILD)/src/main.d $(TOOL_SRC:%.cpp=$(BUILD)/%.d) \
         $(UNIT_SRC:%.cpp=$(BUILD)/%.d) $(MPI_SRC:%.cpp=$(BUILD)/%.d)
