# csekit in a container. CPU by default; the CUDA build differs only in where torch comes from:
#   docker build -t csekit .                                                              # CPU
#   docker build -t csekit:cu128 --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 .   # CUDA 12.8
#   docker run --rm [--gpus all] -v $HOME/.cache/huggingface:/root/.cache/huggingface -v /path/to/data:/data \
#       csekit csekit evaluate princeton-nlp/sup-simcse-bert-base-uncased
# Hub models and datasets download through the Hugging Face cache (mount it to keep them between runs); data is
# mounted or fetched with `csekit download`, never baked into the image.
FROM python:3.11-slim

ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 \
    CSEKIT_DATA_DIR=/data

WORKDIR /opt/csekit
# torch first and pinned, from the chosen wheel index (an unpinned torch from PyPI pulls the CUDA build)
RUN pip install --index-url "$TORCH_INDEX" torch==2.13.0
COPY setup.cfg pyproject.toml README.md ./
COPY tests/constraints.txt ./constraints.txt
COPY csekit ./csekit
COPY modeling ./modeling
COPY trainers ./trainers
COPY recipes ./recipes
COPY model_cards ./model_cards
RUN pip install -c constraints.txt ".[tensorboard]"

CMD ["csekit", "--help"]
