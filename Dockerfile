# A Node the whole suite passed on, in the same userland (docs/testing.md: Node versions);
# Debian 13 (glibc 2.41): the Node 22/24 binaries of uWebSockets.js need glibc >= 2.38 (bookworm has 2.36).
FROM node:22.23.5-trixie-slim
WORKDIR /app
COPY package.json package-lock.json ./
# npm install, not npm ci: see scripts/setup.sh (chdb optional packages missing from the registry)
RUN npm install --no-audit --no-fund
COPY . .
RUN npm run build && npm prune --omit=dev
ENV NODE_ENV=production
EXPOSE 8080
# The Node options of src/shared/node-flags.ts (a unit test checks they match).
CMD ["node", "--max-semi-space-size=64", "dist/src/main.js"]
