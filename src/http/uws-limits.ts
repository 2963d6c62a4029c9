/**
 * uWebSockets.js's limit on a request's header section (request line and headers), set before
 * it loads (src/http/wrap.ts imports this module first): uWS reads `UWS_HTTP_MAX_HEADERS_SIZE`
 * from the environment once, when its binary is loaded.
 *
 * This differs by Node version. `uwebsockets@3.0.6` carries a newer uWS v20 build for Node 22 and
 * 24 (ABI 127, 137) than for Node 20 (ABI 115): the newer one answers a header section over the
 * limit itself, with `431 Request Header Fields Too Large` (HTML, before any handler), and its
 * default limit is 4 KiB — less than a path with a few long ids, which the API answers with its
 * own JSON 4xx; the Node 20 build has no such limit. 16 KiB is Node's own http default
 * (`--max-http-header-size`). An operator's own `UWS_HTTP_MAX_HEADERS_SIZE` is left as it is.
 */
export const MAX_HEADER_BYTES = 16 * 1024;

process.env.UWS_HTTP_MAX_HEADERS_SIZE ??= String(MAX_HEADER_BYTES);
