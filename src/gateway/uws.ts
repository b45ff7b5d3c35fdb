// The only module that imports uWebSockets.js, so the build can be swapped (upstream uWS needs
// glibc 2.38; this build loads on Debian 12 with Node 20).
import uws from '@trufflesuite/uws-js-unofficial';

export type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket } from '@trufflesuite/uws-js-unofficial';
export const App = uws.App;
export const closeListenSocket = uws.us_listen_socket_close;
export const localPort = uws.us_socket_local_port as (socket: unknown) => number;
