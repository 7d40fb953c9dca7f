# The reconciler: `navarch plan|apply` in a slim, non-root image (the CronJob example's).
#   docker build -f deploy/reconciler.Dockerfile -t REGISTRY/navarch:0.1.0 .
# NAVARCH_EXTRAS: the clouds and features this image carries (pyproject.toml's extras).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG NAVARCH_EXTRAS=aws,gcp,azure,ssh
WORKDIR /src
COPY pyproject.toml README.md ./
COPY navarch/ navarch/
COPY schemas/ schemas/
COPY templates/ templates/
COPY playbooks/ playbooks/
# Wheels of navarch and every dependency, so the final stage installs offline.
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[${NAVARCH_EXTRAS}]"

FROM ${PYTHON_IMAGE}
ARG NAVARCH_EXTRAS=aws,gcp,azure,ssh
COPY --from=build /wheels /wheels
# Installs only what build produced (--no-index: the versions are the wheels'), and the
# image keeps no pip cache or wheels.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-index --find-links /wheels "navarch[${NAVARCH_EXTRAS}]" \
    && rm -rf /wheels \
    && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin navarch
USER 10001
ENV NO_COLOR=1 PYTHONDONTWRITEBYTECODE=1
ENTRYPOINT ["navarch"]
CMD ["--help"]
