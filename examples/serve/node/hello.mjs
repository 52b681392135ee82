// ReDe's hello world, from Node.js through `rehydrate serve` (docs/serve.md), with the redis
// npm package (node-redis):
//   rehydrate serve --store sqlite:///jobs.db                    # port 6380
//   rehydrate worker worker:scheduler --store sqlite:///jobs.db  # the Python handler (../worker.py)
//   npm ci && node hello.mjs                                     # REHYDRATE_SERVE_PORT=6380 by default
import { setTimeout as sleep } from "node:timers/promises";
import { createClient } from "redis";

const client = createClient({
  socket: {
    host: process.env.REHYDRATE_SERVE_HOST ?? "127.0.0.1",
    port: Number(process.env.REHYDRATE_SERVE_PORT ?? 6380),
  },
  password: process.env.REHYDRATE_SERVE_PASSWORD || undefined,
});
client.on("error", (error) => console.error("redis client:", error.message));
await client.connect();
const rede = (...args) => client.sendCommand(args.map(String));

// A dehydrator: push an element for 300 ms, look at it, find nothing due yet.
console.log("PUSH", await rede("REDE.PUSH", "greetings", 300, "Dehydrate this", "node-101"));
console.log("LOOK", await rede("REDE.LOOK", "greetings", "node-101"));
console.log("POLL", JSON.stringify(await rede("REDE.POLL", "greetings")));
// TTN: milliseconds until the next element is due; sleep that long, and it is there.
const ttn = Number(await rede("REDE.TTN", "greetings"));
console.log("TTN", ttn >= 0 && ttn <= 300 ? "due within 300 ms" : ttn);
await sleep(ttn);
console.log("POLL", JSON.stringify(await rede("REDE.POLL", "greetings")));

// A job for the Python handler "emails" (../worker.py): JSON text, due in 100 ms, its id the server's.
const job = JSON.stringify({ to: "ada@example.com", from: "node" });
const id = await rede("REDE.GIDPUSH", "emails", 100, job);
console.log("GIDPUSH", id ? "an id" : id);
await client.quit();
