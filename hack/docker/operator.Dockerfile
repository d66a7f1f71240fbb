# The operator image for users with a Docker daemon and a registry (CI builds the same image without a
# daemon: hack/images.sh operator). Build from the repository root:
#   docker build -f hack/docker/operator.Dockerfile --build-arg VERSION=v0.1.0 -t REGISTRY/cellstore/operator:v0.1.0 .
FROM golang:1.26 AS build
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/manager ./operator/cmd

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
