# The reconciler image (also runs the data mover in backup and restore Jobs): a static
# binary on an empty base, as a non-root user, with Debian's CA bundle (the movers verify an
# object store's https:// certificate against it). It builds for the architecture it runs on
# (`docker buildx build --platform linux/arm64` makes an arm64 image; amd64 and arm64 only).
# The test cluster and the release build the same image without Docker (e2e/build-image);
# e2e/release.sh checks that both pack the same files, user and entrypoint.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN case "$(uname -m)" in \
      x86_64|aarch64) triple="$(uname -m)-unknown-linux-gnu" ;; \
      *) echo "no image for $(uname -m)" >&2; exit 1 ;; \
    esac && \
    RUSTFLAGS="-C target-feature=+crt-static" \
      cargo build --release --locked -p hellostateful-reconciler --target "$triple" && \
    cp "target/$triple/release/hellostateful-reconciler" /hellostateful-reconciler && \
    mkdir /image-etc && \
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\nnonroot:x:65532:65532:nonroot:/home/nonroot:/bin/false\n' >/image-etc/passwd && \
    printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >/image-etc/group

FROM scratch
COPY --from=build /hellostateful-reconciler /usr/local/bin/hellostateful-reconciler
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /image-etc/passwd /etc/passwd
COPY --from=build /image-etc/group /etc/group
USER 65532
ENTRYPOINT ["/usr/local/bin/hellostateful-reconciler"]
CMD ["run"]
