// Starts DynamoDB Local bound to one host address (default 127.0.0.1).
//
// DynamoDB Local has no option to choose the listen address: its Jetty server
// is built with a port only, so it listens on every interface. This launcher
// uses DynamoDB Local's embedding entry point
// (ServerRunner.createServerFromCommandLineArgs), sets the host on the Jetty
// connectors before the server starts, then starts it.
//
// Run as a single-file source program (needs the jdk.compiler module, which
// Debian's openjdk-17-jre-headless ships), with DynamoDB Local on the class path:
//
//   java -Djava.library.path=DIR/DynamoDBLocal_lib \
//        -cp 'DIR/DynamoDBLocal.jar:DIR/DynamoDBLocal_lib/*' \
//        DynamoDBLocalLoopback.java -inMemory -port 8000 -disableTelemetry
//
// The host comes from the system property dynamodb.local.host. Arguments are
// DynamoDB Local's own. Telemetry is never configured by this launcher, so
// none is sent whatever the arguments.

import java.lang.reflect.Field;

import org.eclipse.jetty.server.AbstractNetworkConnector;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;

import software.amazon.dynamodb.services.local.main.ServerRunner;
import software.amazon.dynamodb.services.local.server.DynamoDBProxyServer;

public class DynamoDBLocalLoopback {
    public static void main(String[] args) throws Exception {
        String host = System.getProperty("dynamodb.local.host", "127.0.0.1");

        DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);

        Field f = DynamoDBProxyServer.class.getDeclaredField("server");
        f.setAccessible(true);
        Server jetty = (Server) f.get(proxy);

        int bound = 0;
        for (Connector c : jetty.getConnectors()) {
            if (c instanceof AbstractNetworkConnector) {
                ((AbstractNetworkConnector) c).setHost(host);
                bound++;
            }
        }
        if (bound == 0) {
            System.err.println("DynamoDBLocalLoopback: no network connector found; refusing to listen on all interfaces");
            System.exit(1);
        }

        // DynamoDBProxyServer.start() reports a bind failure on stderr and
        // returns, so check that Jetty really started.
        try {
            proxy.start();
        } catch (Exception e) {
            StringBuilder msg = new StringBuilder(e.toString());
            for (Throwable c = e.getCause(); c != null; c = c.getCause()) {
                msg.append("; caused by ").append(c);
            }
            System.err.println("DynamoDBLocalLoopback: could not start DynamoDB Local on " + host + ": " + msg);
            System.exit(1);
        }
        if (!jetty.isStarted()) {
            System.err.println("DynamoDBLocalLoopback: DynamoDB Local did not start");
            System.exit(1);
        }
        for (Connector c : jetty.getConnectors()) {
            if (c instanceof AbstractNetworkConnector) {
                AbstractNetworkConnector n = (AbstractNetworkConnector) c;
                System.out.println("DynamoDB Local listening on http://" + n.getHost() + ":" + n.getLocalPort());
            }
        }
        proxy.join();
    }
}
