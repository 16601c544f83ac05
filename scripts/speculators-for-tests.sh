#!/usr/bin/env bash
# speculators' trainer in an environment of its own, as a speculators user has it, with hsstore's backend in it
# (tests/client/training/test_speculators_backend.py runs the trainer there). speculators 0.9.0 pins
# transformers<=5.19 and hsstore's service pins 5.24, so hsstore goes in without its dependencies, plus what its
# client imports (the guide's recipe). torchvision and torchaudio, which speculators lists and its trainer never
# imports, are left out: no build of them matches the CPU torch 2.13 on disk. Idempotent: a finished environment
# (its stamp) is kept.
set -euo pipefail
venv=${1:-.venv-speculators}
stamp="$venv/.installed-speculators-0.9.0"
[ -f "$stamp" ] && exit 0
rm -rf "$venv"
python3 -m venv "$venv"
py="$venv/bin/python"
"$py" -m pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
pip_install() { "$py" -m pip install -q "$@" 2>&1 | grep -v -e "is ignored" -e "requires torch\(audio\|vision\)" -e "dependency resolver" -e "^hsstore .* requires" || true; }
pip_install torch==2.13.0  # the CPU build on disk, first
pip_install --no-deps speculators==0.9.0 hs-connectors==0.9.0
pip_install transformers==5.19.0 'datasets>=4,<=5.1.0' 'loguru>=0.7.2,<=0.7.3' aiohttp click huggingface-hub \
    'numpy>=2,<=2.5.4' openai protobuf psutil pydantic-settings rich safetensors 'tqdm<=4.70.1' typer
pip_install --no-deps -e .
pip_install 'httpx>=0.27,<1' 'pydantic>=2.7' blake3 crc32c blosc2  # hsstore's client
"$py" -m client.training.speculators_backend install
"$py" -c "import speculators.train.config, hs_connectors as h; assert 'hsstore' in h.HiddenStatesBackend.registry"
touch "$stamp"
