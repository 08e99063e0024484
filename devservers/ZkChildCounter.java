import java.io.File;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.zookeeper.server.DataTree;
import org.apache.zookeeper.server.persistence.FileTxnSnapLog;

/**
 * Sets the child counter (cversion) of znodes in a stopped ZooKeeper server's data directory,
 * so that tests can reach the counter's wrap at 2^31 without creating two billion znodes.
 * Usage: java -cp zookeeper.jar:... ZkChildCounter.java DATA_DIR PATH CVERSION [PATH CVERSION]...
 * It loads the latest snapshot and logs, sets each counter through DataTree (which keeps the
 * tree's digest right) and writes a new snapshot that the server loads when it starts.
 */
public class ZkChildCounter {
    public static void main(String[] args) throws Exception {
        File data = new File(args[0]);
        FileTxnSnapLog log = new FileTxnSnapLog(data, data);
        DataTree tree = new DataTree();
        ConcurrentHashMap<Long, Integer> sessions = new ConcurrentHashMap<>();
        long zxid = log.restore(tree, sessions, (header, txn, digest) -> { });
        for (int i = 1; i + 1 < args.length; i += 2) {
            tree.setCversionPzxid(args[i], Integer.parseInt(args[i + 1]), zxid);
        }
        log.save(tree, sessions, true);
        log.close();
    }
}
