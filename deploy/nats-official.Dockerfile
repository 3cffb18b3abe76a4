# The official NATS image, unchanged (see deploy/compose.nats-official.yml). Must be an -alpine
# tag: the health check needs its wget.
ARG NATS_IMAGE=nats:2.10-alpine
FROM ${NATS_IMAGE}
