# Build and run the Hourglass broker.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin hourglass

FROM debian:bookworm-slim
COPY --from=build /src/target/release/hourglass /usr/local/bin/hourglass
VOLUME /var/lib/hourglass
EXPOSE 5672 15672 15692
ENV HOURGLASS_DATA_DIR=/var/lib/hourglass
ENTRYPOINT ["/usr/local/bin/hourglass"]
