// Launcher for the fauxqs SQS emulator, bound to 127.0.0.1 only.
//
// fauxqs's own CLI listens on 0.0.0.0, so this builds the app and listens on
// loopback itself. Run it with the pinned Node 24 binary (see stack.sh node).
//
// Environment:
//   FAUXQS_PORT            port to listen on (default 9324)
//   FAUXQS_LOGGER=true     enable fastify request logging (default off)
//   FAUXQS_DATA_DIR        if set, persist queues and messages to SQLite in
//                          this directory, so a restart keeps queued messages
//   FAUXQS_DEFAULT_REGION  region for queue ARNs/URLs (fauxqs default us-east-1)
//   FAUXQS_HOST            if set, queue URLs are http://sqs.<region>.<host>:<port>/...
//                          (fauxqs's own style; its default host is "localhost").
//                          Unset: queue URLs use the Host the client connected
//                          to, e.g. http://127.0.0.1:9324/000000000000/name, which
//                          needs no DNS (sqs.us-east-1.localhost often does not
//                          resolve, and some SDKs send requests to the queue URL).
import { buildApp } from "fauxqs";

const port = Number.parseInt(process.env.FAUXQS_PORT ?? "9324", 10);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`fauxqs: invalid FAUXQS_PORT ${JSON.stringify(process.env.FAUXQS_PORT)}`);
  process.exit(2);
}
const logger = process.env.FAUXQS_LOGGER === "true";
const defaultRegion = process.env.FAUXQS_DEFAULT_REGION || undefined;
const dataDir = process.env.FAUXQS_DATA_DIR || undefined;

// The store and persistence classes are not in fauxqs's package exports, so
// load them by file from the installed package (same wiring as fauxqs's own
// startFauxqs in dist/app.js).
const dist = new URL("./node_modules/fauxqs/dist/", import.meta.url);

const [{ SqsStore }, { SnsStore }, { S3Store }] = await Promise.all([
  import(new URL("sqs/sqsStore.js", dist).href),
  import(new URL("sns/snsStore.js", dist).href),
  import(new URL("s3/s3Store.js", dist).href),
]);
const sqsStore = new SqsStore();
const snsStore = new SnsStore();
const s3Store = new S3Store();
// Empty host: fauxqs builds queue URLs from the request's Host header.
sqsStore.host = process.env.FAUXQS_HOST ?? "";

let persistenceManager;
if (dataDir) {
  const { PersistenceManager } = await import(new URL("persistence.js", dist).href);
  persistenceManager = new PersistenceManager(dataDir);
  // Load persisted state before wiring persistence into the stores, as
  // fauxqs does, so loading does not write back.
  persistenceManager.load(sqsStore, snsStore, s3Store);
  sqsStore.persistence = persistenceManager;
  snsStore.persistence = persistenceManager;
  s3Store.persistence = persistenceManager;
  for (const queue of sqsStore.allQueues()) {
    queue.persistence = persistenceManager;
  }
}

const app = buildApp({ logger, defaultRegion, stores: { sqsStore, snsStore, s3Store } });
if (persistenceManager) {
  app.addHook("preClose", () => {
    persistenceManager.close();
  });
}

let closing = false;
async function shutdown(signal) {
  if (closing) return;
  closing = true;
  try {
    await app.close();
    process.exit(0);
  } catch (err) {
    console.error(`fauxqs: error while closing on ${signal}:`, err);
    process.exit(1);
  }
}
process.on("SIGTERM", () => shutdown("SIGTERM"));
process.on("SIGINT", () => shutdown("SIGINT"));

try {
  const address = await app.listen({ host: "127.0.0.1", port });
  const suffix = dataDir ? ` (data dir ${dataDir})` : "";
  console.log(`fauxqs listening on ${address}${suffix}`);
} catch (err) {
  console.error("fauxqs: failed to start:", err);
  process.exit(1);
}
