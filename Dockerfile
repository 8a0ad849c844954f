# The Chronos container image: the one static chronos binary on an otherwise empty root file
# system (CA certificates, time zones, a passwd entry for its non-root user), for NAS, relay
# processes and agents alike. deploy/compose.yaml runs a whole deployment from it; see
# docs/operations.md, "Running in containers".
#
#   docker build -t chronos .            (or: podman build -t chronos .)
#   docker run --rm chronos version
#
# This file pulls its bases (golang, busybox for the setup stage). Offline, `make image` builds the
# same runtime image from a binary built here with deploy/image/Dockerfile (FROM scratch), pulling
# nothing. The image's healthcheck is the binary itself: `chronos healthcheck URL`.
#
# The image runs with a read-only root file system: state lives under the volume
# /var/lib/chronos (the agent's home, NAS's keys), and /tmp should be a tmpfs.

ARG GO_VERSION=1.26
ARG BUSYBOX_VERSION=1.36

# build: a static binary (no cgo), reproducible paths, the version stamped in.
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/chronos ./cmd/chronos
# The final image's file system: the user chronos (65532), the directories it owns, /tmp.
RUN mkdir -p /rootfs/etc /rootfs/etc/chronos /rootfs/var/lib/chronos /rootfs/tmp \
 && echo 'chronos:x:65532:65532:chronos:/var/lib/chronos:/sbin/nologin' > /rootfs/etc/passwd \
 && echo 'chronos:x:65532:' > /rootfs/etc/group \
 && chown 65532:65532 /rootfs/etc/chronos /rootfs/var/lib/chronos \
 && chmod 0700 /rootfs/var/lib/chronos \
 && chmod 1777 /rootfs/tmp

# setup: the binary next to a shell, for one-shot first-run steps (deploy/compose.yaml's
# setup service writes secrets, signing keys and a sample job with it). Not the runtime image.
FROM busybox:${BUSYBOX_VERSION}-musl AS setup
RUN addgroup -g 65532 chronos \
 && adduser -D -H -h /var/lib/chronos -G chronos -u 65532 chronos \
 && mkdir -p /etc/chronos /var/lib/chronos \
 && chown 65532:65532 /etc/chronos /var/lib/chronos
COPY --from=build /out/chronos /usr/local/bin/chronos
USER 65532:65532
ENV CHRONOS_HOME=/var/lib/chronos
WORKDIR /var/lib/chronos

# runtime: the image to run (the default target).
FROM scratch AS runtime
COPY --from=build /rootfs/ /
# The user's directories again with an explicit owner, whatever a builder does with ownership
# across stages: a new volume on /var/lib/chronos takes its owner from here.
COPY --from=build --chown=65532:65532 /rootfs/var/lib/chronos /var/lib/chronos
COPY --from=build --chown=65532:65532 /rootfs/etc/chronos /etc/chronos
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /usr/local/go/lib/time/zoneinfo.zip /usr/local/share/zoneinfo.zip
COPY --from=build /out/chronos /usr/local/bin/chronos
USER 65532:65532
# Job time zones come from Go's zone database (ZONEINFO).
ENV HOME=/var/lib/chronos CHRONOS_HOME=/var/lib/chronos ZONEINFO=/usr/local/share/zoneinfo.zip
WORKDIR /var/lib/chronos
VOLUME ["/var/lib/chronos"]
# NAS's public listener, its internal listener (relay route, operator routes, /metrics),
# a relay process's health listener, an agent's fire endpoint.
EXPOSE 8080 9091 9092 8787
ENTRYPOINT ["/usr/local/bin/chronos"]
CMD ["version"]
