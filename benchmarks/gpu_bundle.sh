#!/usr/bin/env bash
# Build .devenv/site.tar.xz: the Python packages benchmarks/gpu_session.sh needs on a GPU machine that has
# PyTorch but no network and none of Ray, MLflow, Optuna, neuraloperator (this workplace's GPU image,
# Python 3.12). Run it here, where pip reaches PyPI, from the repository root; `gpu_session.sh setup` unpacks
# every .devenv/*.tar.xz into /tmp/site there. .devenv/ is not part of the repository (add it to
# .git/info/exclude and name it in the device call's carry).
#   bash benchmarks/gpu_bundle.sh            # 56 MB on 2026-11-28 (Ray 2.60, MLflow 3.17.2, Optuna 5.0)
# What the image already holds is left out (NumPy, pandas, pyarrow, aiohttp, grpcio, ...), and so is what a
# study does not import: Ray's Java jars, RLlib and LLM modules, MLflow's and optuna-dashboard's web pages, wandb.
set -euo pipefail
PYVER=${PYVER:-3.12}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PLATFORMS=()
for p in manylinux_2_39 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 \
    manylinux2014 manylinux_2_5 manylinux1 linux; do
    PLATFORMS+=(--platform "${p}_x86_64")
done
PIP=(python -m pip)
"${PIP[@]}" install --dry-run --ignore-installed --quiet --report "$WORK/report.json" --target "$WORK/t" \
    --python-version "$PYVER" --implementation cp --only-binary=:all: "${PLATFORMS[@]}" --platform any \
    "ray[default,tune,train]==2.60.0" "mlflow==3.17.2" "optuna==5.0.0" optuna-dashboard "neuraloperator==2.0.0"
# the image's packages, and ones a study never imports
python - "$WORK/report.json" >"$WORK/urls.txt" <<'EOF'
import json, sys
present = set("""aiohttp aiosignal attrs frozenlist multidict yarl propcache aiohappyeyeballs anyio certifi
charset-normalizer click cloudpickle colorama contourpy cycler filelock fonttools fsspec grpcio h11 h5py httpcore
httpx idna jinja2 joblib kiwisolver markupsafe matplotlib msgpack numpy packaging pandas pillow prometheus-client
protobuf psutil pyarrow pyparsing python-dateutil pyyaml requests scikit-learn scipy six threadpoolctl tqdm urllib3
werkzeug xxhash zipp wrapt pytest pluggy iniconfig pygments annotated-doc opt-einsum narwhals""".split())
unused = set("docker gunicorn huey skops wandb cwevals pytest-mock py-spy".split())
for item in json.load(open(sys.argv[1]))["install"]:
    name = item["metadata"]["name"].lower().replace("_", "-")
    if name not in present | unused:
        print(item["download_info"]["url"].split("#")[0])
EOF
mkdir -p "$WORK/whl"
while read -r url; do
    case $url in
        file://*) cp "${url#file://}" "$WORK/whl/" ;;
        *) (cd "$WORK/whl" && curl -fsSLO "$url") ;;
    esac
done <"$WORK/urls.txt"
"${PIP[@]}" install --quiet --no-deps --no-compile --target "$WORK/site" --python-version "$PYVER" --implementation cp \
    --only-binary=:all: "${PLATFORMS[@]}" --platform any "$WORK"/whl/*.whl
rm -rf "$WORK/site/ray/jars" "$WORK/site/ray/rllib" "$WORK/site/ray/llm" "$WORK/site/mlflow/server/js" \
    "$WORK/site/optuna_dashboard/public"
find "$WORK/site" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p .devenv
tar -cf - -C "$WORK/site" . | xz -T0 -9 >.devenv/site.tar.xz
ls -l .devenv/site.tar.xz
