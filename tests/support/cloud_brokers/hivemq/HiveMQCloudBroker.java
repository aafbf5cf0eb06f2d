// HiveMQ CE embedded as a cloud broker for the tests: `java -cp 'lib/*' HiveMQCloudBroker.java
// HOME` runs the broker with HOME/conf/config.xml (its listener), HOME/data (its persistence,
// kept across restarts) and an embedded extension that lets every client in: HiveMQ CE refuses
// all clients unless a security extension says otherwise, and its allow-all extension ships
// with the distribution, not with the embedded artifact.
import com.hivemq.embedded.EmbeddedExtension;
import com.hivemq.extension.sdk.api.ExtensionMain;
import com.hivemq.extension.sdk.api.auth.SimpleAuthenticator;
import com.hivemq.extension.sdk.api.parameter.ExtensionStartInput;
import com.hivemq.extension.sdk.api.parameter.ExtensionStartOutput;
import com.hivemq.extension.sdk.api.parameter.ExtensionStopInput;
import com.hivemq.extension.sdk.api.parameter.ExtensionStopOutput;
import com.hivemq.extension.sdk.api.services.Services;
import java.nio.file.Path;

public class HiveMQCloudBroker {
    static class AllowAll implements ExtensionMain {
        @Override
        public void extensionStart(ExtensionStartInput input, ExtensionStartOutput output) {
            Services.securityRegistry().setAuthenticatorProvider(
                provider -> (SimpleAuthenticator) (connect, result) -> result.authenticateSuccessfully());
        }

        @Override
        public void extensionStop(ExtensionStopInput input, ExtensionStopOutput output) {}
    }

    public static void main(String[] args) throws Exception {
        Path home = Path.of(args[0]);
        EmbeddedExtension allowAll = EmbeddedExtension.builder()
            .withId("outpost-test-allow-all").withName("allow all").withVersion("1")
            .withExtensionMain(new AllowAll()).build();
        var broker = com.hivemq.embedded.EmbeddedHiveMQ.builder()
            .withConfigurationFolder(home.resolve("conf"))
            .withDataFolder(home.resolve("data"))
            .withExtensionsFolder(home.resolve("extensions"))
            .withEmbeddedExtension(allowAll)
            .build();
        broker.start().join();
        System.out.println("cloud broker started");
        System.out.flush();
        Thread.currentThread().join();
    }
}
