#!/usr/bin/env bash
# The pinned environments: real releases the suite judges, each in its own directory (pip install
# --target --no-deps, exact versions, on top of the running Python's torch, numpy, h5py), cached: a
# directory with .complete is kept. Nothing here touches .venv.
#
#   impl/third_party/pinned_envs.sh [NAME...]               # default: all of them, from PyPI
#   PINNED_DIR=/tmp/pinned impl/third_party/pinned_envs.sh   # elsewhere (default .cache/pinned)
#   PINNED_WHEELS=.whl/historic impl/third_party/pinned_envs.sh transformers-5.5.1   # offline (GPU host)
#   PYTHON=python3 ...                                        # another interpreter (default .venv's)
#
# Historic releases with real bugs (conform-model's proof, tools/python/tests/test_historic.py, the
# scoreboard's historic rows):
#   transformers-5.5.1  the use_cache=False bug on KV-shared models (fixed in 5.5.2)
#   transformers-5.5.2  its fix, the control
#   axolotl-0.17.0      axolotl's Gemma-4 fused-attention patch with the transformers it pins (5.9.0),
#                       the Liger it pins (0.7.0) and what its import needs (accelerate 1.13.0, psutil)
#   mlx-lm-0.31.2       the first mlx-lm with Gemma-4 (models/gemma4.py), on today's MLX (mlx-cpu 0.32.4: what
#                       pip resolves for it): training a MoE model fails (GatherMM's VJP with respect to the
#                       router's top-k indices; gemma4_text.py has stop_gradient on them from 0.32.0)
#   mlx-lm-0.31.3       the last 0.31 (KV-shared layers without K/V projections of their own), the MoE bug still in
#   keras-hub-0.28.0    the first keras-hub the adapter runs unchanged (0.27.1's backbone takes no position_ids);
#                       its Gemma-4 code is 0.29.0's: layer_types read as one period (read as a list from 0.29.1);
#                       with TensorFlow's CPU build and what importing it needs: keras-hub < 0.32 imports it
#   (tokenizers 0.22.2: transformers 5.5 and 5.9 refuse at import any tokenizers above 0.23.0.)
# Other frameworks' Gemma-4 on the scoreboard (impl/third_party/*_candidate.py):
#   mlx-lm              mlx-lm 0.32.2 on MLX's CPU build (mlx-cpu)
#   keras-hub           keras-hub 0.32.0 with Keras 3.15.1 on the PyTorch backend; the packages its import
#                       needs, not TensorFlow (sentencepiece: its preset loader imports every converter)
#   llama-cpp           llama-cpp-python 0.3.36 built from its sdist (CPU, AVX2, about 2.5 minutes on 2
#                       cores), and the sdist's convert_hf_to_gguf.py with the gguf-py it is released with
#                       (PyPI's gguf 0.19.0 is older than the converter's)
#   torchao             torchao 0.18.0 (its int4 weight-only path that runs on a CPU, IntxWeightOnlyConfig),
#                       for transformers' TorchAoConfig
#   onnxruntime         ONNX Runtime 1.32.0 (CPU) and the torch.onnx exporter's onnxscript 0.7.2 / onnx 1.23.2
#   jax-gemma           google-deepmind's gemma 4.0.1 (JAX) and what importing its Gemma-4 needs: a venv of
#                       $PYTHON312 (default python3.12; gemma needs Python >= 3.12) that also sees that
#                       interpreter's own site-packages (parent.pth), where JAX and flax are taken from when
#                       present (the GPU host's); else jax[cpu] 0.11.2 and flax 0.12.12 from PyPI
#   easydel             EasyDeL 0.3.0 (Flax NNX, jax 0.9.2 CPU) with its pins (transformers 5.5.4) and what its import needs
#   vllm                vLLM 0.25.0 (the newest release pinning torch 2.11.0; its wheel is for CUDA 13 GPUs)
#                       and the packages its engine imports (FastAPI too: vllm.LLM imports it), not its
#                       server's (OpenTelemetry, MCP, Anthropic) nor FlashInfer; xgrammar 0.2.6 with
#                       apache-tvm-ffi 0.1.10 (vLLM pins tvm-ffi 0.1.9 for FlashInfer; xgrammar 0.2.1-0.2.5,
#                       which accept 0.1.9, are 45-48 MB wheels). Built on request only (GPU host: PINNED_WHEELS=.whl/vllm after ci/gpu/carry_pinned.sh --join vllm,
#                       where vLLM itself is the trimmed tarball that script makes)
#   vllm-transformers-5.13.1  the newest transformers vLLM 0.25.0 can read a Gemma-4 config with (5.14
#                       moved the layers' geometry into per_layer_config and refuses vLLM's global read of
#                       config.head_dim); put before vllm on the PYTHONPATH of vLLM's rows. On request only.
#   unsloth             unsloth and unsloth_zoo 2026.10.9 (the newest; Gemma-4 since transformers 5.5, accept torch
#                       < 2.15 and transformers <= 5.17.0) for the GPU host, and what `import unsloth` and
#                       FastModel.from_pretrained need there that the host lacks: bitsandbytes 0.50.2 (unsloth_zoo's
#                       patch_model_and_tokenizer imports it even at full precision), trl, datasets and its dill and
#                       multiprocess; not the rest of its metadata (xformers, diffusers, torchao, tyro, msgspec,
#                       hf_transfer, cut_cross_entropy: not imported on that path). Built on request only (CUDA only;
#                       GPU host: PINNED_WHEELS=.whl/unsloth after ci/gpu/carry_pinned.sh --join unsloth, where unsloth
#                       and bitsandbytes are trimmed tarballs)
#   impl/third_party/pinned_envs.sh --list NAME   prints an environment's requirements
# A pin with a trimmed tarball in PINNED_WHEELS (DIST-VERSION-trimmed.tar.xz, ci/gpu/carry_pinned.sh) is unpacked
# into the environment instead of installed.
# All of them (vllm and unsloth excepted): about 3 minutes on a 2-core machine before the historic keras-hub (1.3 GB:
# TensorFlow) and EasyDeL (0.9 GB: jaxlib, ray) were added; llama-cpp's build is most of it.
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../.."
DIR=${PINNED_DIR:-.cache/pinned}
PYTHON=${PYTHON:-.venv/bin/python}
declare -A ENVS=(
  [transformers-5.5.1]="transformers==5.5.1 tokenizers==0.22.2"
  [transformers-5.5.2]="transformers==5.5.2 tokenizers==0.22.2"
  [axolotl-0.17.0]="axolotl==0.17.0 transformers==5.9.0 tokenizers==0.22.2 liger-kernel==0.7.0 accelerate==1.13.0 psutil==7.2.2"
  [mlx-lm]="mlx-lm==0.32.2 mlx==0.32.4 mlx-cpu==0.32.4"
  [keras-hub]="keras-hub==0.32.0 keras==3.15.1 absl-py==2.5.1 optree==0.20.0 ml-dtypes==0.6.0 rich==15.0.0 packaging==26.4 regex==2026.11.19 tokenizers==0.23.3 sentencepiece==0.2.3"
  [mlx-lm-0.31.2]="mlx-lm==0.31.2 mlx==0.32.4 mlx-cpu==0.32.4"
  [mlx-lm-0.31.3]="mlx-lm==0.31.3 mlx==0.32.4 mlx-cpu==0.32.4"
  [keras-hub-0.28.0]="keras-hub==0.28.0 keras==3.15.1 absl-py==2.5.1 optree==0.20.0 ml-dtypes==0.6.0 rich==15.0.0 packaging==26.4 regex==2026.11.19 tokenizers==0.23.3 sentencepiece==0.2.3 tensorflow-cpu==2.21.0 astunparse==1.6.3 flatbuffers==25.12.19 gast==0.7.0 google-pasta==0.2.0 opt-einsum==3.4.0 protobuf==7.36.2 six==1.17.0 termcolor==3.3.0 wrapt==2.1.1"
  [llama-cpp]="diskcache==5.6.3"
  [torchao]="torchao==0.18.0"
  [onnxruntime]="onnxruntime==1.32.0 onnx==1.23.2 onnxscript==0.7.2 onnx-ir==1.1.0 flatbuffers==25.12.19 coloredlogs==15.0.1 humanfriendly==10.0 protobuf==7.36.2 ml_dtypes==0.6.0"
  [vllm]="vllm==0.25.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 msgspec==0.23.0 cbor2==6.3.0 pyzmq==27.3.0 pybase64==1.5.1 cachetools==8.0.2 blake3==1.0.11 openai==3.57.0 httpx2==2.16.2 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1 openai-harmony==0.0.8 llguidance==1.7.6 xgrammar==0.2.6 apache-tvm-ffi==0.1.10 outlines_core==0.2.14 lm-format-enforcer==0.11.3 interegular==0.3.3 lark==1.2.2 diskcache==5.6.3 partial-json-parser==0.2.1.1.post7 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 compressed-tensors==0.17.0 loguru==0.7.3 depyf==0.20.0 astor==0.8.1 dill==0.4.1 python-json-logger==4.2.0 setproctitle==1.3.8 ijson==3.6.0 gguf==0.19.0 fastapi==0.136.3 starlette==1.10.0"
  [vllm-transformers-5.13.1]="transformers==5.13.1 tokenizers==0.22.2"
  [unsloth]="unsloth==2026.10.9 unsloth_zoo==2026.10.9 bitsandbytes==0.50.2 trl==1.15.0 datasets==4.8.5 dill==0.4.1 multiprocess==0.70.19"
  [easydel]="easydel==0.3.0 jax==0.9.2 jaxlib==0.9.2 flax==0.12.3 eformer==0.0.99.12 ejkernel==0.0.78 transformers==5.5.4 tokenizers==0.22.2 ray==2.54.0 msgpack==1.2.4 protobuf==7.36.2 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==0.30.0 attrs==26.1.0 ml_dtypes==0.5.4 opt_einsum==3.4.0 scipy==1.16.3 einops==0.8.1 google-cloud-storage==3.17.1 google-cloud-core==2.8.0 google-api-core==2.44.0 google-auth==2.63.0 google-resumable-media==2.11.0 google-crc32c==1.9.0 googleapis-common-protos==1.76.0 proto-plus==1.29.0 pyasn1==0.6.5 pyasn1-modules==0.4.2 rsa==4.9.1 cachetools==8.0.2 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 optax==0.2.8 ml-collections==1.1.0 plum-dispatch==2.3.2 beartype==0.23.1 mergedeep==1.3.4 tblib==3.0.0 contextlib2==21.6.0 tensorstore==0.1.86 braceexpand==0.1.7 chex==0.1.92 toolz==1.2.0 jaxtyping==0.3.11 wadler-lindig==0.1.8 absl-py==2.5.1 treescope==0.1.10 msgspec==0.19.0 pyzmq==27.3.0 partial-json-parser==0.2.1.1.post7 fastapi==0.136.3 starlette==1.10.0 annotated-doc==0.0.7 pillow==13.0.0 uvicorn==0.54.0"
  [jax-gemma]="gemma==4.0.1 kauldron==1.4.4 immutabledict==4.3.1 typeguard==4.6.1 lark==1.3.1 clu==0.0.12 dialog==1.1.0 ml_collections==1.1.0"
)
LLAMA_CPP_SDIST=llama_cpp_python-0.3.36.tar.gz
LLAMA_CPP_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
source_args=()
[ -n "${PINNED_WHEELS:-}" ] && source_args=(--no-index --find-links "$PINNED_WHEELS")

# llama-cpp-python compiles llama.cpp: CPU only, no tools or tests, the interpreter's own build backend
# (scikit-build-core in .venv, no isolated download); the converter tree is kept beside the package,
# run as a dependency by llama_cpp_candidate.py.
build_llama_cpp() {
  local target=$1 work
  work=$(mktemp -d)
  "$PYTHON" -m pip download -q --no-deps --no-binary :all: --no-build-isolation "${source_args[@]}" -d "$work" \
    llama-cpp-python==0.3.36
  echo "$LLAMA_CPP_SHA256  $work/$LLAMA_CPP_SDIST" | sha256sum -c --quiet -
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_APP=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$PYTHON" -m pip install -q --target "$target" --no-deps --no-compile --no-build-isolation "$work/$LLAMA_CPP_SDIST"
  tar -xzf "$work/$LLAMA_CPP_SDIST" -C "$work"
  local vendor="$work/${LLAMA_CPP_SDIST%.tar.gz}/vendor/llama.cpp"
  mkdir -p "$target/llama_cpp_convert"
  cp -r "$vendor/convert_hf_to_gguf.py" "$vendor/conversion" "$vendor/gguf-py" "$vendor/LICENSE" "$target/llama_cpp_convert/"
  rm -rf "$work"
}

# gemma needs Python >= 3.12: a venv of that interpreter (the scoreboard runs the adapter with its
# bin/python), seeing the interpreter's own packages through parent.pth; JAX from PyPI only if absent.
build_jax_gemma() {
  local target=$1 python=${PYTHON312:-python3.12} site
  "$python" -m venv "$target"
  site=$("$target/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$python" -c 'import site; print("\n".join(site.getsitepackages()))' > "$site/parent.pth"
  "$target/bin/python" -m pip install -q --no-deps --no-compile "${source_args[@]}" ${ENVS[jax-gemma]}
  if ! "$target/bin/python" -c 'import jax, flax, h5py, safetensors' 2>/dev/null; then
    "$target/bin/python" -m pip install -q "${source_args[@]}" "jax[cpu]==0.11.2" flax==0.12.12 etils einops jaxtyping \
      treescope numpy h5py safetensors absl-py sentencepiece tqdm pyyaml rich orbax-checkpoint optax chex requests \
      pillow wrapt simplejson humanize psutil protobuf msgpack typing-extensions
  fi
}

# The pins into the target (pip --target --no-deps); offline, a pin whose trimmed tarball is in PINNED_WHEELS
# (DIST-VERSION-trimmed.tar.xz: vLLM, unsloth, bitsandbytes; ci/gpu/carry_pinned.sh makes them) is unpacked
# there instead, after pip (which refuses to install into a target directory already holding the package).
install_pins() {
  local target=$1 pin tarball pins=() trimmed=()
  shift
  for pin in "$@"; do
    tarball="${PINNED_WHEELS:-}/${pin%%==*}-${pin#*==}-trimmed.tar.xz"
    if [ -n "${PINNED_WHEELS:-}" ] && [ -f "$tarball" ]; then trimmed+=("$tarball"); else pins+=("$pin"); fi
  done
  if [ ${#pins[@]} -gt 0 ]; then
    "$PYTHON" -m pip install -q --no-deps --no-compile --target "$target" "${source_args[@]}" "${pins[@]}"
  fi
  for tarball in "${trimmed[@]}"; do mkdir -p "$target" && tar -xJf "$tarball" -C "$target"; done
}

if [ "${1:-}" = --list ]; then
  echo "${ENVS[${2:?--list NAME}]}"
  exit 0
fi
# Built only when named: too big for CI's default set, and for the GPU host only (vLLM's, unsloth's).
ON_REQUEST='^(vllm.*|unsloth)$'
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for name in "${!ENVS[@]}"; do [[ "$name" =~ $ON_REQUEST ]] || names+=("$name"); done
fi
for name in "${names[@]}"; do
  if [ -z "${ENVS[$name]+set}" ]; then
    echo "[pinned] unknown environment '$name' (known: ${!ENVS[*]})" >&2
    exit 2
  fi
  if [ -f "$DIR/$name/.complete" ]; then echo "[pinned] $DIR/$name: cached"; continue; fi
  if [ "$name" = jax-gemma ] &&
     ! "${PYTHON312:-python3.12}" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then
    echo "[pinned] $DIR/$name: skipped: no Python >= 3.12 as ${PYTHON312:-python3.12} (gemma needs it; set PYTHON312)" >&2
    continue
  fi
  rm -rf "${DIR:?}/$name"
  echo "[pinned] $DIR/$name: ${ENVS[$name]}"
  start=$SECONDS
  if [ "$name" = jax-gemma ]; then
    build_jax_gemma "$DIR/$name"
  else
    # shellcheck disable=SC2086
    install_pins "$DIR/$name" ${ENVS[$name]}
  fi
  [ "$name" = llama-cpp ] && build_llama_cpp "$DIR/$name"
  touch "$DIR/$name/.complete"
  echo "[pinned] $DIR/$name: built in $((SECONDS - start)) s"
done
