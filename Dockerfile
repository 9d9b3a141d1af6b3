# Kvasir server image: Debian 12, built from source with the README's own steps
# (scripts/install-deps.sh, then scripts/build.sh release: what scripts/demo.sh runs before its
# demo), installed with `cmake --install`, run as an unprivileged user.
#   docker build -t kvasir .
#   docker run --rm -p 8080:8080 -v /path/to/models:/models:ro kvasir /models/model.gguf
# The model is the first argument (vLLM's `serve MODEL`); any `kvasir serve` option may follow,
# or come from KVASIR_* environment variables (docker run -e KVASIR_API_KEY=...).
# tests/packaging/dockerfile_test.sh checks that these steps stay the README's.
FROM debian:12 AS build
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates git sudo \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN scripts/install-deps.sh
RUN scripts/build.sh release
RUN cmake --install build/release --prefix /opt/kvasir

FROM debian:12-slim
# The shared libraries bin/kvasir links (ldd build/release/kvasir).
RUN apt-get update && apt-get install -y --no-install-recommends \
      libbrotli1 libcpp-httplib0.11 libfmt9 libhwy1 libicu72 libpcre2-32-0 libspdlog1.10 \
      libssl3 libstdc++6 libtomlplusplus3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --no-create-home --shell /usr/sbin/nologin kvasir
COPY --from=build /opt/kvasir/bin/kvasir /usr/local/bin/kvasir
USER kvasir
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/kvasir", "serve", "--host", "0.0.0.0", "--port", "8080"]
CMD ["--help"]
