/**
 * A TCP forwarder in front of the test database whose link the test can cut and restore:
 * the store behind it is out of reach (its connections closed, new ones dropped) while the
 * database itself runs on, as after a network cut.
 */

import net from "node:net";

export class Forwarder {
  private readonly server: net.Server;
  private readonly links = new Set<net.Socket>();
  private isCut = false;
  /** Connections made through it. */
  accepted = 0;

  private constructor(
    private readonly target: URL,
    server: net.Server,
  ) {
    this.server = server;
  }

  static async open(dsn: string): Promise<Forwarder> {
    const target = new URL(dsn);
    const server = net.createServer();
    const f = new Forwarder(target, server);
    server.on("connection", (client) => {
      f.accept(client);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return f;
  }

  /** The DSN through the forwarder. */
  get dsn(): string {
    const url = new URL(this.target.toString());
    const address = this.server.address() as net.AddressInfo;
    url.hostname = "127.0.0.1";
    url.port = String(address.port);
    return url.toString();
  }

  private accept(client: net.Socket): void {
    if (this.isCut) {
      client.destroy();
      return;
    }
    this.accepted += 1;
    const upstream = net.connect(Number(this.target.port || 5432), this.target.hostname || "127.0.0.1");
    for (const [a, b] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      this.links.add(a);
      a.on("error", () => undefined);
      a.on("close", () => {
        this.links.delete(a);
        b.destroy();
      });
      a.pipe(b);
    }
  }

  cut(): void {
    this.isCut = true;
    for (const s of this.links) s.destroy();
    this.links.clear();
  }

  restore(): void {
    this.isCut = false;
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => {
      resolve();
    }));
  }
}
