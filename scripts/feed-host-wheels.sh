#!/usr/bin/env bash
# The wheels that run benchmarks/feed.py on the GPU machine's host, its direct-read variant included, into .whl-feed/:
# the project's dependencies (../shared/gpu/project-wheels.sh) and moto's S3 server, without the GPU kernels
# (causal-conv1d, fla: feed.py runs no model) and with botocore's data cut to the S3 and STS models that moto and boto3
# use here (every AWS service's model is 28 MB, and a carry to the device is 64 MiB with the tree). After `make test`
# has built .venv:
#   scripts/feed-host-wheels.sh
# then on the GPU machine, carrying .whl-feed:
#   source .whl-feed/install.sh && export PYTHONPATH=$PWD:$PYTHONPATH && python benchmarks/feed.py ...
set -euo pipefail
moto="moto boto3 botocore s3transfer jmespath cryptography cffi pycparser requests urllib3 idna certifi
charset-normalizer responses werkzeug xmltodict flask flask-cors jinja2 markupsafe itsdangerous blinker python-dateutil
six py-partiql-parser"
EXTRA_WHEELS="blake3 crc32c blosc2 msgpack ndindex threadpoolctl obstore swagger-ui-bundle httptools $moto" ../shared/gpu/project-wheels.sh >/dev/null
grep -qx "/.whl-feed/" .git/info/exclude || echo "/.whl-feed/" >> .git/info/exclude
rm -rf .whl-feed && mkdir .whl-feed
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in causal_conv1d-* | fla_core-* | flash_linear_attention-* | botocore-*) ;; *) cp "$wheel" .whl-feed/ ;; esac
done
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
(cd "$work" && python3 -m zipfile -e "$OLDPWD"/.whl/botocore-*.whl . \
  && find botocore/data -mindepth 1 -maxdepth 1 -type d ! -name s3 ! -name sts -exec rm -rf {} + \
  && python3 -m zipfile -c "$OLDPWD/.whl-feed/$(basename "$OLDPWD"/.whl/botocore-*.whl)" botocore botocore-*.dist-info)
cat > .whl-feed/install.sh <<'SH'
# Source at the start of a GPU-machine command (carrying .whl-feed): installs the feed benchmark's wheels into /tmp/site.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/*.whl || return 1
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
python3 -c "import torch, transformers, moto, boto3, obstore; print('feed-stack:', torch.__version__, 'transformers', transformers.__version__, 'moto', moto.__version__, torch.cuda.get_device_name())"
SH
du -sh .whl-feed
