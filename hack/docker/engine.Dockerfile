# The engine image for users with a Docker daemon and a registry (CI builds the same image without a
# daemon: hack/images.sh engine). Build from the repository root:
#   docker build -f hack/docker/engine.Dockerfile --build-arg VERSION=v0.1.0 -t REGISTRY/cellstore/engine:v0.1.0 .
FROM golang:1.26 AS build
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/cellstore ./engine/cmd/cellstore

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/cellstore /usr/local/bin/cellstore
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/cellstore"]
