# One image for every catraca process; docker-compose.yml picks the entry point per service.
# TypeScript runs through tsx (a runtime dependency), so there is no build step.
FROM node:20-bookworm-slim

ENV NODE_ENV=production \
    NPM_CONFIG_UPDATE_NOTIFIER=false \
    NPM_CONFIG_FUND=false
WORKDIR /app

COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --loglevel=error && npm cache clean --force

COPY --chown=node:node . .

USER node
EXPOSE 8080 8081
# Default: the front door. Other services override the command.
CMD ["node", "--import", "tsx", "src/gateway/main.ts"]
