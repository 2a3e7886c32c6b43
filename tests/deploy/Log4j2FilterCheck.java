// Logs each stdin line as one message of logger kafka.request.logger at DEBUG through log4j2,
// configured by -Dlog4j2.configurationFile. Run by tests/deploy/test_log4j2_filter.py with
// log4j-core from Spark's jars (Java's single-file source launcher, nothing to build).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

public class Log4j2FilterCheck {
    public static void main(String[] args) throws Exception {
        Logger logger = LogManager.getLogger("kafka.request.logger");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            logger.debug(line);
        }
        LogManager.shutdown();
    }
}
