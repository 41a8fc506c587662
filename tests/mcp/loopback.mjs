// Preloaded into server-everything's streamable HTTP mode (`node --import loopback.mjs ...`):
// that server listens on $PORT on every interface and has no host option, so a listen() given
// only a port is bound to 127.0.0.1 here. Once listening, the real address is printed to stderr
// as `ferry-loopback: listening on 127.0.0.1:PORT`, which makes PORT=0 usable (no port race).
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || (typeof args[0] === "string" && /^\d+$/.test(args[0]))) {
    args.splice(1, 0, "127.0.0.1");
  }
  this.once("listening", () => {
    const { address, port } = this.address();
    console.error(`ferry-loopback: listening on ${address}:${port}`);
  });
  return listen.apply(this, args);
};
