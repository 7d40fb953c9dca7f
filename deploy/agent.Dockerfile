# The node agent as a container (the DaemonSet example's): the agent bundle on a slim
# Python, run in a loop instead of the systemd timer.
#   docker build -f deploy/agent.Dockerfile -t REGISTRY/navarch-agent:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY navarch/ navarch/
COPY schemas/ schemas/
COPY templates/ templates/
COPY playbooks/ playbooks/
# The bundle vendors the agent's pure-Python dependencies from this stage's install.
RUN pip install --no-cache-dir . \
    && python -c "from navarch.agent.bundle import write_bundle; write_bundle('/navarch-agent.pyz')"

FROM ${PYTHON_IMAGE}
COPY --from=build /navarch-agent.pyz /usr/local/lib/navarch/navarch-agent.pyz
# Same command line as the systemd unit (isolated: nothing else on the image is imported),
# looping every 60 s. Root, because NVML opens /dev/nvidia* and the kernel log is
# /dev/kmsg; the DaemonSet example runs it privileged with the host's /dev.
# Unpacked once into the host's state directory, so Python caches its bytecode there.
ENV NAVARCH_BUNDLE_CACHE=/var/lib/navarch/bundle
ENTRYPOINT ["python3", "-I", "-S", "/usr/local/lib/navarch/navarch-agent.pyz"]
CMD ["run", "--config", "/etc/navarch/agent.yaml", "--interval-s", "60"]
