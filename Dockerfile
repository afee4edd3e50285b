# The reconciler image (also runs the data mover in backup and restore Jobs): a static
# binary on an empty base, as a non-root user. The test cluster builds the same image
# without Docker (e2e/build-image); this file is for registries and real clusters.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked -p hellostateful-reconciler --target x86_64-unknown-linux-gnu

FROM scratch
COPY --from=build /src/target/x86_64-unknown-linux-gnu/release/hellostateful-reconciler /usr/local/bin/hellostateful-reconciler
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/hellostateful-reconciler"]
CMD ["run"]
