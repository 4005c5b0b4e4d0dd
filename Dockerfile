# mcp-connect: multi-stage build. The build needs no database (sqlx offline data in .sqlx/);
# the runtime image is small and runs as a non-root user.
FROM rust:1-slim-bookworm AS build
WORKDIR /src
ENV SQLX_OFFLINE=true
COPY . .
# Without the `dev` feature: the production binary carries no built-in OAuth server.
RUN cargo build --release --locked -p mcp-connect --bin mcp-connect --no-default-features

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin mcp-connect
COPY --from=build /src/target/release/mcp-connect /usr/local/bin/mcp-connect
USER 10001:10001
EXPOSE 8080
# Ready: /readyz answers 200 (503 while draining after SIGTERM, or without the database).
HEALTHCHECK --interval=10s --timeout=5s --retries=3 \
    CMD ["/usr/local/bin/mcp-connect", "healthcheck", "--config", "/etc/mcp-connect/mcp-connect.toml"]
ENTRYPOINT ["/usr/local/bin/mcp-connect"]
CMD ["serve", "--config", "/etc/mcp-connect/mcp-connect.toml"]
